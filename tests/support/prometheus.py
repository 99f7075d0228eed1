"""A real Prometheus scraping a drifting vLLM-like metrics server, for the rollout tests.

``drifting_metrics()`` serves ``/metrics`` on 127.0.0.1 with vLLM's metric names for two pools
(``pool="baseline"``, ``pool="candidate"``); a thread adds observations every 100 ms from a
seeded RNG around each pool's profile, which a test changes at any time::

    with drifting_metrics() as metrics, prometheus_server(targets=[metrics.target]) as url:
        metrics.set(pool="candidate", tpot_median_s=0.040)
        prometheus_wait(lambda: instant_query(url=url, query=...) is not None)

``prometheus_server()`` runs Debian's Prometheus on a free port with its own config and data
folder (a system instance on 9090 is neither used nor touched), and skips the test, naming
bin/ensure-prometheus, where the binary is missing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from tests.support.net import free_port

PROMETHEUS = os.environ.get("SPECREVIEW_PROMETHEUS_BIN", "/usr/bin/prometheus")
POOLS = ("baseline", "candidate")
TICK_S = 0.1
SCRAPE_INTERVAL = "1s"
Z95 = 1.6448536269514722  # the standard normal's 0.95 quantile

# Finer than vLLM's own TPOT buckets (0.01, 0.025, 0.05, 0.075, 0.1, ...) below 100 ms, so that
# histogram_quantile's linear interpolation lands within a few percent of the planted p95.
TPOT_BUCKETS = tuple(round(0.0025 * i, 4) for i in range(1, 41)) + (0.125, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)
# Half-second steps where the pools' end-to-end p95 lies (a few seconds), so an A/A rollout's
# difference of p95s is not dominated by interpolation inside one wide bucket.
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 30.0, 60.0)


@dataclasses.dataclass(frozen=True)
class PoolProfile:
    """What one pool's traffic looks like. Seconds, tokens, requests per second, fractions."""

    tpot_median_s: float = 0.020  # median time per output token
    tpot_sigma: float = 0.25  # the lognormal's shape (log-space standard deviation)
    ttft_median_s: float = 0.150
    output_tokens: int = 200  # per request
    requests_per_s: float = 50.0
    tpot_samples_per_request: int = 5  # TPOT observations per request (vLLM observes one per step)
    draft_tokens_per_request: int = 60
    acceptance: float = 0.7  # accepted / drafted
    preemptions_per_s: float = 0.5
    kv_cache_usage: float = 0.4  # 0..1
    abort_share: float = 0.002  # requests that finish aborted
    structured_share: float = 0.3  # requests whose output is checked against a schema
    invalid_share: float = 0.01  # of those, the invalid ones

    def tpot_p95_s(self) -> float:
        """The planted TPOT's 95th percentile, seconds."""
        return self.tpot_median_s * math.exp(Z95 * self.tpot_sigma)


class DriftingMetrics:
    """The metrics server: ``set(pool=..., **profile)`` changes a pool from the next tick on."""

    def __init__(self, *, seed: int = 7, model_name: str = "spec-model", pools: tuple[str, ...] = POOLS) -> None:
        self.model_name = model_name
        self.registry = CollectorRegistry()
        labels = ["model_name", "pool"]
        self.tpot = Histogram(
            "vllm:time_per_output_token_seconds",
            "Time per output token in seconds.",
            labels,
            buckets=TPOT_BUCKETS,
            registry=self.registry,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "End-to-end request latency in seconds.",
            labels,
            buckets=E2E_BUCKETS,
            registry=self.registry,
        )
        self.drafted = Counter(
            "vllm:spec_decode_num_draft_tokens", "Draft tokens proposed.", labels, registry=self.registry
        )
        self.accepted = Counter(
            "vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted.", labels, registry=self.registry
        )
        self.preemptions = Counter(
            "vllm:num_preemptions", "Cumulative number of preemptions.", labels, registry=self.registry
        )
        self.successes = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=self.registry,
        )
        # What a gateway validating structured outputs exports (vLLM counts none; docs/rollouts.md).
        self.structured = Counter(
            "specreview_structured_outputs", "Outputs checked against a schema.", labels, registry=self.registry
        )
        self.invalid = Counter(
            "specreview_structured_outputs_invalid", "Outputs that failed it.", labels, registry=self.registry
        )
        self.kv_usage = Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage, 1 = 100%.", labels, registry=self.registry
        )
        self.pools = tuple(pools)
        self._profiles = {pool: PoolProfile() for pool in self.pools}
        self._lock = threading.Lock()
        self._rng = np.random.default_rng(seed)
        self._stop = threading.Event()
        self._http: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []

    @property
    def target(self) -> str:
        """``host:port`` for a Prometheus scrape config."""
        assert self._http is not None, "the server is not started"
        return f"127.0.0.1:{self._http.server_port}"

    def profile(self, pool: str) -> PoolProfile:
        with self._lock:
            return self._profiles[pool]

    def set(self, *, pool: str, **changes: float) -> PoolProfile:
        """Change ``pool``'s profile (any PoolProfile field, e.g. ``tpot_median_s=0.04``,
        ``acceptance=0.5``); returns the new profile."""
        if pool not in self._profiles:
            raise KeyError(f"no pool {pool!r}: the pools are {self.pools}")
        with self._lock:
            self._profiles[pool] = dataclasses.replace(self._profiles[pool], **changes)  # type: ignore[arg-type]
            return self._profiles[pool]

    def tick(self, dt_s: float = TICK_S) -> None:
        """Add ``dt_s`` seconds' worth of traffic to every pool."""
        with self._lock:
            profiles = dict(self._profiles)
            rng = self._rng
            for pool, p in profiles.items():
                labels = (self.model_name, pool)
                requests = int(rng.poisson(p.requests_per_s * dt_s))
                tpots = rng.lognormal(
                    math.log(p.tpot_median_s), p.tpot_sigma, requests * p.tpot_samples_per_request
                )
                tpot = self.tpot.labels(*labels)
                for value in tpots:
                    tpot.observe(float(value))
                ttfts = rng.lognormal(math.log(p.ttft_median_s), 0.3, requests)
                e2e = self.e2e.labels(*labels)
                for ttft, step in zip(ttfts, tpots[:: max(p.tpot_samples_per_request, 1)], strict=False):
                    e2e.observe(float(ttft + p.output_tokens * step))
                drafted = requests * p.draft_tokens_per_request
                self.drafted.labels(*labels).inc(drafted)
                self.accepted.labels(*labels).inc(int(rng.binomial(drafted, p.acceptance)) if drafted else 0)
                self.preemptions.labels(*labels).inc(int(rng.poisson(p.preemptions_per_s * dt_s)))
                aborted = int(rng.binomial(requests, p.abort_share)) if requests else 0
                self.successes.labels(*labels, "abort").inc(aborted)
                self.successes.labels(*labels, "stop").inc(requests - aborted)
                checked = int(rng.binomial(requests, p.structured_share)) if requests else 0
                self.structured.labels(*labels).inc(checked)
                self.invalid.labels(*labels).inc(int(rng.binomial(checked, p.invalid_share)) if checked else 0)
                noise = float(rng.normal(0.0, 0.02))
                self.kv_usage.labels(*labels).set(min(max(p.kv_cache_usage + noise, 0.0), 1.0))

    def start(self) -> None:
        registry = self.registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
                pass

        self.tick()  # every series exists before the first scrape
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self._threads = [
            threading.Thread(target=self._http.serve_forever, name="metrics-http", daemon=True),
            threading.Thread(target=self._drift, name="metrics-drift", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _drift(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            next_at += TICK_S
            self._stop.wait(max(next_at - time.monotonic(), 0.0))
            self.tick()

    def stop(self) -> None:
        self._stop.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        for thread in self._threads:
            thread.join(timeout=5)


@contextlib.contextmanager
def drifting_metrics(
    *, seed: int = 7, model_name: str = "spec-model", pools: tuple[str, ...] = POOLS
) -> Iterator[DriftingMetrics]:
    """A started DriftingMetrics, stopped on exit."""
    server = DriftingMetrics(seed=seed, model_name=model_name, pools=pools)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def prometheus_server(*, targets: list[str], start_timeout_s: float = 20.0) -> Iterator[str]:
    """Prometheus on 127.0.0.1 scraping ``targets`` (``host:port``) every second, in its own
    temporary folder; yields its base URL once every target has been scraped (``up == 1``).
    Skips the test where the binary is missing."""
    if not (Path(PROMETHEUS).is_file() and os.access(PROMETHEUS, os.X_OK)):
        pytest.skip(
            f"no Prometheus at {PROMETHEUS}: run bin/ensure-prometheus (make test does) "
            "or set SPECREVIEW_PROMETHEUS_BIN"
        )
    folder = Path(tempfile.mkdtemp(prefix="specreview-prometheus-"))
    # YAML is a superset of JSON: the config needs no YAML writer.
    config = {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": "900ms",
            "evaluation_interval": "1s",
        },
        "scrape_configs": [{"job_name": "vllm", "static_configs": [{"targets": targets}]}],
    }
    (folder / "prometheus.yml").write_text(json.dumps(config))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (folder / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1h",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        _wait_ready(url, process, folder, targets=len(targets), timeout_s=start_timeout_s)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def _wait_ready(url: str, process: subprocess.Popen, folder: Path, *, targets: int, timeout_s: float) -> None:
    def failed(why: str) -> None:
        tail = (folder / "prometheus.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"Prometheus on {url} {why}; its log:\n{tail}")

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            failed(f"exited with {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200 and _up(url) >= targets:
                return
        time.sleep(0.1)
    failed(f"did not scrape its {targets} target(s) within {timeout_s:g} s")


def _up(url: str) -> int:
    response = httpx.get(f"{url}/api/v1/query", params={"query": "sum(up)"}, timeout=2)
    result = response.json()["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def prometheus_wait(check: Callable[[], bool], *, timeout_s: float = 15.0, every_s: float = 0.25) -> None:
    """Poll ``check`` until it returns True (Prometheus data arrives once per scrape);
    fails the test after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return
        if time.monotonic() > deadline:
            pytest.fail(f"still not true after {timeout_s:g} s: {getattr(check, '__doc__', None) or check}")
        time.sleep(every_s)
