"""What a replay takes and gives: the requests to send, one record per request, the result.

Times are seconds from the replay's start on the perf_counter clock; token counts are
target-model tokens.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from workers.engines.base import EngineRequest


@dataclass(frozen=True)
class RequestSpec:
    """One request to replay and its arrival offset (seconds from the trace start)."""

    request: EngineRequest
    arrival_s: float
    key: Any = None  # carried into the record untouched (e.g. the TraceRequest's primary key)
    session_id: str | None = None  # the turns of one conversation share it; None: a lone request
    turn: int = 0  # 0-based; a later turn ignores arrival_s and follows its previous turn
    think_time_s: float = 0.0  # seconds after the previous turn's answer finished (turn > 0)


@dataclass
class RequestRecord:
    """What happened to one request. Seconds from the replay start; counts in tokens.

    ``status`` is ``ok``, ``failed`` (``error`` says why), ``cancelled`` (in flight when the
    replay was cancelled) or ``not_sent`` (due after the cancellation, or a later turn of a
    session whose previous turn did not finish: ``error`` says which). A later turn's
    ``scheduled_s`` is its previous turn's ``finish_s`` plus its think time.
    """

    request_id: str
    index: int
    scheduled_s: float
    key: Any = None
    session_id: str | None = None
    turn: int = 0
    sent_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    queue_s: float = 0.0
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int | None] = field(default_factory=list)
    output_text: str = ""
    output_token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    # A server's per-request totals when it sent no steps (``{"drafts", "draft_tokens", "accepted"}``).
    spec_totals: dict[str, int] | None = None
    # The engine's count of the prompt it sent (chat template, tools, system prompt included);
    # None when the engine could not tell (the store then falls back to the trace's count).
    prompt_tokens: int | None = None
    error: str = ""
    error_transient: bool = False
    status: str = "pending"

    @property
    def num_output_tokens(self) -> int:
        """Tokens generated: the ids if the engine gave them, else the per-chunk counts it knew."""
        if self.output_token_ids:
            return len(self.output_token_ids)
        return sum(n for n in self.chunk_tokens if n)

    @property
    def send_lateness_s(self) -> float | None:
        """Seconds between the scheduled time and the hand-off to the engine, less queueing."""
        return None if self.sent_s is None else self.sent_s - self.scheduled_s - self.queue_s

    def as_row(self) -> dict[str, Any]:
        """The ``analysis.RequestResult`` fields (without ``run`` and ``trace_request``)."""
        return {
            "request_id": self.request_id,
            "scheduled_s": self.scheduled_s,
            "sent_s": self.sent_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s,
            "queue_s": self.queue_s,
            "chunk_times": self.chunk_times,
            "chunk_tokens": self.chunk_tokens,
            "num_output_tokens": self.num_output_tokens,
            "output_text": self.output_text,
            "output_token_ids": self.output_token_ids,
            "finish_reason": self.finish_reason,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "spec_totals": self.spec_totals,
            "error": self.error,
        }


@dataclass
class ReplayResult:
    """One replay. ``records`` holds the measured requests only, in the order given."""

    records: list[RequestRecord]
    start_perf: float  # perf_counter() at the window's start: records are relative to it
    started_at: dt.datetime
    ended_at: dt.datetime
    wall_s: float  # window start to the last request's end (seconds)
    rate_multiplier: float
    concurrency_cap: int | None
    warmup: int
    cancelled: bool
    counters_before: dict[str, Any]
    counters_after: dict[str, Any]
    counters_delta: dict[str, Any]
    telemetry: dict[str, Any]
    versions: dict[str, str]  # the engine's and its libraries' versions
    hardware: dict[str, Any]  # CPU model and count, memory, GPUs (see telemetry.hardware_describe)
    deadline_exceeded: bool = False  # stopped (cancelled) because the run's deadline passed

    @property
    def failed(self) -> list[RequestRecord]:
        return [r for r in self.records if r.status == "failed"]

    def send_lateness(self) -> dict[str, float | None]:
        """Client-side send lateness (seconds): p50, p99, max, and the share over 5 ms."""
        values = sorted(v for r in self.records if (v := r.send_lateness_s) is not None)
        if not values:
            return {"p50_s": None, "p99_s": None, "max_s": None, "share_over_5ms": None}
        return {
            "p50_s": percentile(values=values, q=50),
            "p99_s": percentile(values=values, q=99),
            "max_s": values[-1],
            "share_over_5ms": sum(v > 0.005 for v in values) / len(values),
        }


def percentile(*, values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of sorted values, linear interpolation (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    pos = (len(values) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def counters_delta(*, before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """``after - before`` for numbers and (element-wise) lists of numbers; other values from after."""
    out: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key)
        if _is_number(value) and _is_number(old):
            out[key] = value - old
        elif isinstance(value, list) and all(_is_number(v) for v in value):
            old_list = old if isinstance(old, list) else []
            out[key] = [v - (old_list[i] if i < len(old_list) else 0) for i, v in enumerate(value)]
        else:
            out[key] = value
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def run_telemetry_row(result: ReplayResult) -> dict[str, Any]:
    """What a finished replay stores as its run's telemetry (``RunTelemetry``'s fields).

    An engine in this process (hf, vllm): the worker's own memory is the engine's. An engine on
    another host (openai): this process is only the replay client, so its memory is stored as the
    client's (``counters["client"]``) and never as the run's; the run's memory, utilisation and
    energy come from the server's registered telemetry (``counters["server_telemetry"]`` says its
    source), else they are None: not measured.
    """
    tele = result.telemetry or {}
    counters: dict[str, Any] = {**result.counters_delta, **({"kv": tele["kv"]} if tele.get("kv") else {})}
    own_peak = tele.get("peak_rss_bytes") or tele.get("peak_memory_bytes")
    if tele.get("engine_in_process", True):
        return {
            "peak_memory_bytes": own_peak,
            "gpu_peak_memory_bytes": tele.get("gpu_peak_memory_bytes"),
            "mean_util": tele.get("mean_util"),
            "energy_j": tele.get("energy_j"),
            "cpu_time_s": tele.get("cpu_time_s"),
            "counters": counters,
            "samples": tele.get("samples", []),
        }
    server = dict(tele.get("server") or {})
    samples = server.pop("samples", [])
    counters["client"] = {"peak_rss_bytes": own_peak, "cpu_time_s": tele.get("cpu_time_s")}
    counters["server_telemetry"] = server or {
        "source": None,
        "reason": "the server's registration names no telemetry: its memory is not measured",
    }
    on_gpu = str(server.get("source") or "").startswith(("DCGM", "Prometheus"))
    return {
        "peak_memory_bytes": server.get("peak_memory_bytes"),
        "gpu_peak_memory_bytes": server.get("peak_memory_bytes") if on_gpu else None,
        "mean_util": server.get("mean_util"),
        "energy_j": server.get("energy_j"),
        "cpu_time_s": None,  # the client's CPU time is in counters["client"]
        "counters": counters,
        "samples": samples,
    }
