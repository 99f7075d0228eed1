"""An openai arm's memory is the server's, from the telemetry its operator registered, or not
measured: never the replay client's own memory (issue 21, point 1).

The servers here are real HTTP servers on 127.0.0.1: the scripted OpenAI-compatible stream
server (tests/support/stream_server.py) and a DCGM-shaped exporter page served by http.server.
"""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from console.env import SettingsError, envopenai_servers
from console.experiments.models import Run
from console.experiments.services import experiment_create
from tests.experiments.factories import trace_make
from workers.engines.server_telemetry import (
    ServerTelemetrySampler,
    dcgm_page_read,
    telemetry_reader,
    telemetry_spec_check,
)
from workers.execution import run_execute

# dcgm-exporter's default counters, two GPUs (NVIDIA/dcgm-exporter etc/default-counters.csv)
DCGM_PAGE = """# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",modelName="NVIDIA H200"} 20480
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-b",modelName="NVIDIA H200"} 1024
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %%).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",modelName="NVIDIA H200"} 80
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",modelName="NVIDIA H200"} 0
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",modelName="NVIDIA H200"} 400.5
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-b",modelName="NVIDIA H200"} 70
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-a",modelName="NVIDIA H200"} %(energy)d
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="1",UUID="GPU-b",modelName="NVIDIA H200"} 5000
"""


def test_it_reads_a_dcgm_page_for_the_gpus_it_is_told():
    both = dcgm_page_read(DCGM_PAGE % {"energy": 1000})
    assert both == {"memory_bytes": 21504 * 2**20, "util_pct": 40.0, "power_w": 470.5, "energy_mj": 6000.0}
    first = dcgm_page_read(DCGM_PAGE % {"energy": 1000}, gpus=[0])
    assert first == {"memory_bytes": 20480 * 2**20, "util_pct": 80.0, "power_w": 400.5, "energy_mj": 1000.0}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "nvml"}, "telemetry.kind must be one of"),
        ({"kind": "dcgm"}, "telemetry.url must be an http(s) URL"),
        ({"kind": "dcgm", "url": "http://u:p@h:9400/metrics"}, "no user, password"),
        ({"kind": "dcgm", "url": "http://h:9400/metrics", "gpus": ["0"]}, "telemetry.gpus"),
        ({"kind": "metrics", "url": "http://h"}, "takes no ['url']"),
        ({"kind": "prometheus", "url": "http://prom:9090", "queries": {"rss": "x"}}, "telemetry.queries"),
    ],
)
def test_it_refuses_a_telemetry_registration_naming_the_server_and_the_field(spec, message, monkeypatch):
    with pytest.raises(ValueError, match="srv") as caught:
        telemetry_spec_check(spec, where="srv")
    assert message in str(caught.value)
    monkeypatch.setenv("X_SERVERS", json.dumps({"gpu-a": {"url": "http://h:8000/v1", "telemetry": spec}}))
    with pytest.raises(SettingsError, match="X_SERVERS: server 'gpu-a'"):
        envopenai_servers("X_SERVERS", credentials={})


def test_a_registered_telemetry_reaches_the_registry_as_checked_json(monkeypatch):
    telemetry = {"kind": "dcgm", "url": "http://dcgm:9400/metrics/", "gpus": [1, 0]}
    monkeypatch.setenv("X_SERVERS", json.dumps({"gpu-a": {"url": "http://h:8000/v1", "telemetry": telemetry}}))
    entry = envopenai_servers("X_SERVERS", credentials={})["gpu-a"]
    assert json.loads(entry["telemetry"]) == {"kind": "dcgm", "url": "http://dcgm:9400/metrics", "gpus": [0, 1]}


@pytest.fixture
def dcgm_exporter():
    """A DCGM-shaped page whose energy counter grows 100 J per read."""
    reads = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            reads.append(1)
            body = (DCGM_PAGE % {"energy": 1000 + 100_000 * len(reads)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics", reads
    server.shutdown()


def test_it_samples_a_dcgm_exporter_through_a_window(dcgm_exporter):
    url, reads = dcgm_exporter
    source, read = telemetry_reader(telemetry_spec_check({"kind": "dcgm", "url": url, "gpus": [0]}, where="t"), metrics_url="", headers={})
    sampler = ServerTelemetrySampler(source=source, read=read, interval_s=0.05)
    sampler.start()
    time.sleep(0.3)
    summary = sampler.stop()
    assert summary["source"] == f"DCGM exporter {url}"
    assert summary["peak_memory_bytes"] == 20480 * 2**20 and summary["mean_util"] == 80.0
    # the energy counter's delta over the window: 100 J a read, first read to last
    assert summary["energy_j"] == pytest.approx(100.0 * (len(reads) - 1))
    assert summary["num_samples"] == len(reads) >= 3 and not summary["read_errors"]


def _register(settings, url, telemetry=None):
    servers = {"plain": {"url": url, "credential": ""}}
    if telemetry:
        servers["measured"] = {"url": url, "credential": "", "telemetry": json.dumps(telemetry)}
    settings.SPECREVIEW_OPENAI_SERVERS = servers


@pytest.mark.django_db(transaction=True)  # the replay's heartbeat writes from its own thread
def test_an_openai_arm_stores_the_servers_memory_or_none_never_the_clients(settings, viewer_client):
    from console.analysis.comparison.schema import summary_load
    from console.analysis.services import comparison_refresh
    from console.decisions import gate
    from console.results.models import RunTelemetry
    from tests.support.stream_server import Script, stream_server_start

    server = stream_server_start(script=Script(tokens=[1, 2]), model="m")
    server.server.metrics_extra = "process_resident_memory_bytes 3221225472.0\n"
    try:
        _register(settings, server.base_url, telemetry={"kind": "metrics"})
        experiment = experiment_create(
            name="memory-sources",
            trace=trace_make(prompts=["a", "b"]),
            engine="openai",
            target_model="m",
            baseline_engine_args={"server": "measured"},
            candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}, "engine_args": {"server": "plain"}}],
            repeats=1,
            warmup=0,
        )
        for run in experiment.runs.order_by("order"):
            assert run_execute(run_id=run.pk) == "done", Run.objects.get(pk=run.pk).error
    finally:
        server.stop()
    base = RunTelemetry.objects.get(run__experiment=experiment, run__arm__is_baseline=True)
    cand = RunTelemetry.objects.get(run__experiment=experiment, run__arm__is_baseline=False)
    # the server's own page said 3 GiB; the client's RSS is kept apart, labelled as the client's
    assert base.peak_memory_bytes == 3 * 2**30
    assert base.counters["server_telemetry"]["source"].startswith("server /metrics")
    assert cand.peak_memory_bytes is None and cand.gpu_peak_memory_bytes is None
    assert cand.counters["client"]["peak_rss_bytes"] > 10 * 2**20
    assert cand.counters["server_telemetry"]["source"] is None
    summary = comparison_refresh(experiment_id=experiment.pk, n_boot=50)
    sources = summary["memory_sources"]
    label = cand.run.arm.label
    assert sources["baseline"].startswith("server /metrics") and sources[label].startswith("not measured")
    # the page says so per arm: the server's source for one, a not-measured badge for the other
    html = viewer_client.get(f"/analysis/experiments/{experiment.pk}/").content.decode()
    section = html[html.index('id="memory-sources"') :]
    section = section[: section.index("</section>")]
    assert "server /metrics" in section and '<span class="badge na">not measured</span>' in section
    assert "the worker process" not in section  # neither openai arm's memory is the worker's
    facts = gate.gate_facts_from_summary(
        summary_load(summary), candidate_arm=label, traffic_class="interactive", capacity_bytes=64 * 2**30
    )
    result = gate.gate_evaluate(facts, None, traffic_class="interactive")
    memory = next(c for c in result["criteria"] if c["key"] == "memory_headroom")
    assert memory["status"] == "not_measured" and "names no telemetry" in memory["summary"], memory
