"""Where a remote server's memory, utilisation and power are read: what its operator registered.

An ``openai`` arm's engine runs on another host, so the replay worker's own memory says nothing
about it. A registered server (``SPECREVIEW_OPENAI_SERVERS``) may name its telemetry:

- ``{"kind": "metrics"}``: the server's own ``/metrics`` page, ``process_resident_memory_bytes``
  (prometheus_client's process collector: on vLLM that is the API server process, not its engine
  core process, so it is labelled as such);
- ``{"kind": "dcgm", "url": "http://host:9400/metrics", "gpus": [0, 1]}``: an NVIDIA DCGM
  exporter's page; ``gpus`` (optional) keeps only those ``gpu`` labels. Fields as dcgm-exporter's
  default counters define them (NVIDIA/dcgm-exporter ``etc/default-counters.csv``):
  ``DCGM_FI_DEV_FB_USED`` (framebuffer used, MiB), ``DCGM_FI_DEV_GPU_UTIL`` (%),
  ``DCGM_FI_DEV_POWER_USAGE`` (W), ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ since boot);
- ``{"kind": "prometheus", "url": "http://prom:9090", "queries": {"memory_bytes": "...",
  "gpu_util_pct": "...", "power_w": "..."}}``: instant queries against a Prometheus HTTP API
  (``/api/v1/query``), each result vector summed (utilisation: averaged).

:func:`telemetry_spec_check` validates a registration (the settings call it, so a bad one stops
the process at start with the server's name); :func:`telemetry_reader` turns one into a
``(source, read)`` pair: ``read()`` returns ``{"memory_bytes", "util_pct", "power_w",
"energy_mj"}`` (keys it cannot read absent). Without a registration nothing is read: the arm's
server memory is not measured. Plain data and HTTP; no Django.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from .openai_metrics import prometheus_samples

TELEMETRY_KINDS = ("metrics", "dcgm", "prometheus")
QUERY_KEYS = ("memory_bytes", "gpu_util_pct", "power_w")
DCGM_FIELDS = {
    "DCGM_FI_DEV_FB_USED": "memory_mib",
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
}
READ_TIMEOUT_S = 5.0

Read = Callable[[], dict[str, float]]


def telemetry_spec_check(spec: Any, *, where: str) -> dict[str, Any]:
    """A registered server's ``telemetry`` entry, checked; raises ValueError saying ``where``
    and which field is wrong."""
    if not isinstance(spec, Mapping):
        raise ValueError(f'{where}: telemetry must be an object such as {{"kind": "dcgm", "url": "..."}}')
    kind = spec.get("kind")
    if kind not in TELEMETRY_KINDS:
        raise ValueError(f"{where}: telemetry.kind must be one of {list(TELEMETRY_KINDS)}, got {kind!r}")
    allowed = {"metrics": {"kind"}, "dcgm": {"kind", "url", "gpus"}, "prometheus": {"kind", "url", "queries"}}[kind]
    extra = sorted(set(spec) - allowed)
    if extra:
        raise ValueError(f"{where}: telemetry of kind {kind!r} takes no {extra}; it takes {sorted(allowed)}")
    out: dict[str, Any] = {"kind": kind}
    if kind == "metrics":
        return out
    url = spec.get("url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{where}: telemetry.url must be an http(s) URL, got {url!r}")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"{where}: telemetry.url must carry no user, password, query or fragment")
    out["url"] = str(url).rstrip("/")
    if kind == "dcgm" and spec.get("gpus") is not None:
        gpus = spec["gpus"]
        if not isinstance(gpus, list) or not all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus):
            raise ValueError(f"{where}: telemetry.gpus must be a list of GPU indices, got {gpus!r}")
        out["gpus"] = sorted(set(gpus))
    if kind == "prometheus":
        queries = spec.get("queries")
        if not isinstance(queries, Mapping) or not queries or set(queries) - set(QUERY_KEYS):
            raise ValueError(f"{where}: telemetry.queries must map some of {list(QUERY_KEYS)} to PromQL strings")
        if not all(isinstance(q, str) and q.strip() and len(q) <= 2000 for q in queries.values()):
            raise ValueError(f"{where}: each telemetry query must be a non-empty PromQL string (at most 2,000 characters)")
        out["queries"] = dict(queries)
    return out


def telemetry_reader(
    spec: Mapping[str, Any] | None, *, metrics_url: str, headers: Mapping[str, str]
) -> tuple[str, Read] | None:
    """``(source, read)`` for a checked telemetry spec; None without one. ``metrics_url`` and
    ``headers`` are the server's own (for ``kind: metrics``); other kinds get no credential."""
    if not spec:
        return None
    kind = spec["kind"]
    if kind == "metrics":
        if not metrics_url:
            return None
        return (
            f"server /metrics {metrics_url} (process_resident_memory_bytes: the API server process)",
            lambda: _metrics_read(url=metrics_url, headers=headers),
        )
    if kind == "dcgm":
        gpus = spec.get("gpus")
        return f"DCGM exporter {spec['url']}", lambda: _dcgm_read(url=spec["url"], gpus=gpus)
    return f"Prometheus {spec['url']}", lambda: _prometheus_read(url=spec["url"], queries=spec["queries"])


def _page(url: str, headers: Mapping[str, str] | None = None) -> str:
    response = httpx.get(url, headers=dict(headers or {}), timeout=READ_TIMEOUT_S)
    response.raise_for_status()
    return response.text


def _metrics_read(*, url: str, headers: Mapping[str, str]) -> dict[str, float]:
    rss = [v for name, _, v in prometheus_samples(text=_page(url, headers)) if name == "process_resident_memory_bytes"]
    return {"memory_bytes": sum(rss)} if rss else {}


def dcgm_page_read(text: str, *, gpus: list[int] | None = None) -> dict[str, float]:
    """One DCGM exporter page as ``{"memory_bytes", "util_pct", "power_w", "energy_mj"}``: memory,
    power and energy summed over the GPUs kept, utilisation their mean."""
    values: dict[str, list[float]] = {}
    for name, labels, value in prometheus_samples(text=text):
        # prometheus_client's parser names a counter's sample ``<name>_total``; the exporter's is bare
        key = DCGM_FIELDS.get(name.removesuffix("_total"))
        if key is None:
            continue
        if gpus is not None and _gpu_index(labels) not in gpus:
            continue
        values.setdefault(key, []).append(value)
    out: dict[str, float] = {}
    if values.get("memory_mib"):
        out["memory_bytes"] = sum(values["memory_mib"]) * 2**20
    if values.get("util_pct"):
        out["util_pct"] = sum(values["util_pct"]) / len(values["util_pct"])
    for key in ("power_w", "energy_mj"):
        if values.get(key):
            out[key] = sum(values[key])
    return out


def _gpu_index(labels: Mapping[str, str]) -> int | None:
    try:
        return int(labels.get("gpu", ""))
    except ValueError:
        return None


def _dcgm_read(*, url: str, gpus: list[int] | None) -> dict[str, float]:
    return dcgm_page_read(_page(url), gpus=gpus)


def _prometheus_read(*, url: str, queries: Mapping[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, query in queries.items():
        response = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=READ_TIMEOUT_S)
        response.raise_for_status()
        body = response.json()
        result = (body.get("data") or {}).get("result") if isinstance(body, dict) else None
        if body.get("status") != "success" or not isinstance(result, list) or not result:
            continue
        values = [float(r["value"][1]) for r in result if isinstance(r, dict) and isinstance(r.get("value"), list)]
        values = [v for v in values if v == v and abs(v) != float("inf")]
        if values:
            name = "util_pct" if key == "gpu_util_pct" else key
            out[name] = sum(values) / len(values) if name == "util_pct" else sum(values)
    return out


class ServerTelemetrySampler:
    """Call a telemetry ``read`` every ``interval_s`` in a thread while a run's window is open.

    A read that fails (the exporter blinked) is skipped and counted; ``stop()`` returns
    :func:`server_telemetry_summary` of the readings, with the ``source`` and the failures."""

    def __init__(self, *, source: str, read: Read, interval_s: float = 1.0):
        self.source, self._read, self.interval_s = source, read, interval_s
        self._rows: list[tuple[float, dict[str, float]]] = []
        self._errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._sample()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="server-telemetry")
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        if self._thread is None:
            raise RuntimeError("server telemetry sampler was not started")
        self._stop.set()
        self._thread.join()
        self._sample()
        return server_telemetry_summary(rows=self._rows, source=self.source, errors=self._errors)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        try:
            reading = self._read()
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            self._errors.append(f"{type(exc).__name__}: {exc}"[:300])
            return
        if reading:
            self._rows.append((time.perf_counter() - self._t0, reading))


def server_telemetry_summary(
    *, rows: list[tuple[float, dict[str, float]]], source: str, errors: list[str] | None = None
) -> dict[str, Any]:
    """``source``, ``peak_memory_bytes``/``mean_memory_bytes``, ``mean_util`` (percent),
    ``mean_power_w``, ``energy_j`` (the energy counter's delta, else power integrated over the
    readings' times; None with fewer than two readings), ``num_samples``, ``read_errors``, and
    ``samples`` rows ``[t_s, memory_bytes, util_pct, power_w]``. Figures nothing measured are None."""

    def series(key: str) -> list[tuple[float, float]]:
        return [(t, float(r[key])) for t, r in rows if key in r]

    memory, util, power, energy = (series(k) for k in ("memory_bytes", "util_pct", "power_w", "energy_mj"))
    energy_j: float | None = None
    if len(energy) >= 2:
        energy_j = (energy[-1][1] - energy[0][1]) / 1000
    elif len(power) >= 2:
        energy_j = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(power, power[1:], strict=False))
    return {
        "source": source,
        "peak_memory_bytes": int(max(v for _, v in memory)) if memory else None,
        "mean_memory_bytes": sum(v for _, v in memory) / len(memory) if memory else None,
        "mean_util": sum(v for _, v in util) / len(util) if util else None,
        "mean_power_w": sum(v for _, v in power) / len(power) if power else None,
        "energy_j": energy_j,
        "num_samples": len(rows),
        "read_errors": (errors or [])[:5],
        "samples": [
            [round(t, 3), r.get("memory_bytes"), r.get("util_pct"), r.get("power_w")]
            for t, r in rows[:: max(1, -(-len(rows) // 300))]
        ],
    }
