"""Reads for traces: lists, one trace, its requests by split, and the figures of its page."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import plotly.graph_objects as go
from django.conf import settings
from django.core.cache import cache
from django.db.models import Avg, Count, Max, Min, Q, QuerySet
from django.db.models.functions import Mod

from console.accounts import teams
from console.accounts.access import raw_text_shown
from console.figures import figure_html
from console.traces.models import Trace, TraceRequest
from console.traces.parsers import PARSERS, TIMING
from console.traces.redaction import redaction_sentence

FIGURE_SAMPLE = 200_000  # rows read for the histograms; larger traces are sampled evenly by position


def trace_list(*, user: Any) -> QuerySet[Trace]:
    """The traces of the user's teams, newest first."""
    return teams.visible(Trace.objects.select_related("uploaded_by", "team"), user).order_by("-created_at")


def trace_get(*, user: Any, pk: int) -> Trace:
    """One trace of the user's teams (Http404 otherwise, another team's included)."""
    return teams.visible_get(Trace.objects.select_related("uploaded_by", "team"), user, pk=pk, what="trace")


def trace_requests(*, trace: Trace, split: str | None = None) -> QuerySet[TraceRequest]:
    """The trace's requests in arrival order; ``split`` is 'train', 'holdout' or None for all."""
    qs = TraceRequest.objects.filter(trace=trace).order_by("position")
    if split and split != "all":
        qs = qs.filter(split=split)
    return qs


def trace_sample_requests(*, trace: Trace, n: int = 12) -> list[TraceRequest]:
    """``n`` requests spread evenly over the trace (first, last and in between)."""
    count = trace.request_count
    if count <= n:
        return list(trace_requests(trace=trace))
    positions = sorted({round(i * (count - 1) / (n - 1)) for i in range(n)})
    return list(trace_requests(trace=trace).filter(position__in=positions))


SUMMARY_FIGURES = (
    "prompt_tokens_mean",
    "prompt_tokens_max",
    "max_tokens_mean",
    "max_tokens_max",
    "duration_s",
)


def trace_summary(*, trace: Trace) -> dict[str, Any]:
    """What the trace page says of the requests: the summary the import stored, with the figures
    it lacks read off the stored requests. Only a file import writes a summary; a trace built
    otherwise (a synthetic or fixture trace, one stored before the summary existed) has none, and
    its page would show empty numbers. Tokens; ``duration_s`` and ``mean_rate_rps`` in seconds and
    requests per second; ``token_counter`` is "" where the import did not record it."""
    stored = dict(trace.summary or {})
    if all(stored.get(k) is not None for k in SUMMARY_FIGURES):
        return stored
    figures = TraceRequest.objects.filter(trace=trace).aggregate(
        n=Count("id"),
        prompt_tokens_mean=Avg("prompt_tokens"),
        prompt_tokens_max=Max("prompt_tokens"),
        max_tokens_mean=Avg("max_tokens"),
        max_tokens_max=Max("max_tokens"),
        first=Min("arrival_s"),
        last=Max("arrival_s"),
        with_tools=Count("id", filter=Q(tools__isnull=False) & ~Q(tools=[])),
        with_json_schema=Count("id", filter=Q(response_format__type="json_schema")),
    )
    n, first, last = figures.pop("n"), figures.pop("first"), figures.pop("last")
    span = (last - first) if n else None
    figures["duration_s"] = span
    figures["mean_rate_rps"] = n / span if n > 1 and span else None
    return figures | {k: v for k, v in stored.items() if v is not None}


def trace_counts(*, trace: Trace) -> dict[str, Any]:
    """Requests by task and traffic class (a table), and by split."""
    rows = (
        TraceRequest.objects.filter(trace=trace)
        .values("task", "traffic_class")
        .annotate(n=Count("id"))
        .order_by("task", "traffic_class")
    )
    classes = sorted({r["traffic_class"] for r in rows})
    table: dict[str, dict[str, int]] = {}
    for r in rows:
        table.setdefault(r["task"], {c: 0 for c in classes})[r["traffic_class"]] = r["n"]
    splits = dict(
        TraceRequest.objects.filter(trace=trace)
        .values_list("split")
        .annotate(n=Count("id"))
        .order_by("split")
    )
    return {
        "classes": classes,
        "rows": [
            (task, [counts[c] for c in classes], sum(counts.values())) for task, counts in table.items()
        ],
        "splits": splits,
    }


def _column(trace: Trace, field: str) -> np.ndarray:
    qs = TraceRequest.objects.filter(trace=trace)
    if trace.request_count > FIGURE_SAMPLE:
        step = -(-trace.request_count // FIGURE_SAMPLE)
        qs = qs.annotate(sample=Mod("position", step)).filter(sample=0)
    values = list(qs.values_list(field, flat=True))
    return np.array([v for v in values if v is not None], dtype=float)


FIGURE_LAYOUT = {
    "height": 280,
    "margin": {"l": 50, "r": 15, "t": 40, "b": 45},
    "template": "plotly_white",
    "font": {"size": 12},
    "showlegend": False,
}


def _html(fig: go.Figure) -> str:
    return figure_html(fig, layout=FIGURE_LAYOUT)


def trace_figures(*, trace: Trace) -> dict[str, str]:
    """:func:`_trace_figures`, cached: a trace's requests never change after import (its sha256
    names them), and walking 10,000 of them for the charts was most of the trace page's time."""
    key = f"trace-figures:{trace.pk}:{trace.sha256}"
    cached = cache.get(key)
    if cached is None:
        cached = _trace_figures(trace=trace)
        cache.set(key, cached, timeout=24 * 3600)
    return cached


def _trace_figures(*, trace: Trace) -> dict[str, str]:
    """HTML fragments (plotly.js loaded by the page): arrival rate, prompt and output length distributions.

    Arrival rate is requests per second in up to 120 equal bins over the trace's duration (seconds).
    Prompt length is in tokens (``prompt_tokens``); output length is ``max_tokens`` (tokens).
    """
    if not trace.request_count:
        return {}
    arrivals = _column(trace, "arrival_s")
    duration = float(arrivals.max() - arrivals.min()) if arrivals.size else 0.0
    bins = max(1, min(120, int(np.sqrt(arrivals.size)) or 1))
    figures: dict[str, str] = {}
    if duration > 0:
        counts, edges = np.histogram(arrivals, bins=bins)
        width = edges[1] - edges[0]
        fig = go.Figure(
            go.Scatter(x=edges[:-1] + width / 2, y=counts / width, mode="lines", line_shape="hvh")
        )
        fig.update_layout(
            title=f"Arrival rate (requests/s, {width:.3g} s bins)",
            xaxis_title="time since trace start (s)",
            yaxis_title="requests/s",
        )
        figures["arrivals"] = _html(fig)
    for field, title, axis in (
        ("prompt_tokens", "Prompt length", "prompt tokens"),
        ("max_tokens", "Output length (max_tokens)", "output tokens"),
    ):
        values = _column(trace, field)
        if values.size:
            fig = go.Figure(go.Histogram(x=values, nbinsx=50))
            fig.update_layout(title=title, xaxis_title=axis, yaxis_title="requests")
            figures[field] = _html(fig)
    return figures


def trace_content_kind(*, trace: Trace) -> str:
    """'requests', 'prompts' or 'timing': what the source file carried."""
    parser = PARSERS.get(trace.source_format)
    return (trace.metadata or {}).get("content") or (parser.kind if parser else "requests")


def trace_is_paired(*, trace: Trace) -> bool:
    return trace.is_paired or trace_content_kind(trace=trace) == TIMING


def trace_redaction(*, trace: Trace) -> dict[str, Any] | None:
    """What redaction at import replaced (a sentence, and the team's own pattern names); None if the
    trace was not redacted."""
    stored = (trace.metadata or {}).get("redaction")
    if not isinstance(stored, dict):
        return None
    replaced = {str(k): int(v) for k, v in (stored.get("replaced") or {}).items()}
    return {
        "sentence": redaction_sentence(replaced),
        "patterns": [str(p) for p in stored.get("patterns") or []],
    }


def pairing_pool_choices(*, user: Any) -> list[tuple[str, str]]:
    """Choices for the upload form: the user's teams' stored traces with real content (a trace pairs
    only with its own team's), then prompt files in the shared data."""
    choices: list[tuple[str, str]] = []
    for t in trace_list(user=user).filter(paired_with="")[:50]:
        if trace_content_kind(trace=t) != TIMING:
            choices.append((f"trace:{t.pk}", f"trace {t.pk}: {t.name} ({t.request_count} prompts)"))
    root = settings.SPECREVIEW_SHARED_DATA / "prompts"
    if root.is_dir():
        for path in sorted(root.glob("*/*")):
            if path.suffix in (".json", ".jsonl") and path.is_file():
                rel = path.relative_to(settings.SPECREVIEW_SHARED_DATA).as_posix()
                choices.append((f"shared:{rel}", f"shared data: {rel}"))
    return choices


def trace_as_dict(trace: Trace, *, detail: bool = False) -> dict[str, Any]:
    """The API's view of a trace (times ISO 8601, sizes bytes)."""
    data: dict[str, Any] = {
        "id": trace.pk,
        "name": trace.name,
        "source_filename": trace.source_filename,
        "source_format": trace.source_format,
        "size_bytes": trace.size_bytes,
        "sha256": trace.sha256,
        "content_sha256": trace.content_sha256,
        "request_count": trace.request_count,
        "holdout_fraction": trace.holdout_fraction,
        "seed": trace.seed,
        "arrival_spec": trace.arrival_spec,
        "paired_with": trace.paired_with or None,
        "created_at": trace.created_at.isoformat(),
        "uploaded_by": trace.uploaded_by.username if trace.uploaded_by else None,
        "url": f"/traces/{trace.pk}/",
        "team": trace.team.name,
    }
    if detail:
        data["warnings"] = trace.warnings
        data["summary"] = trace.summary
        data["metadata"] = trace.metadata
    return data


def trace_request_as_dict(r: TraceRequest, *, raw_text: bool) -> dict[str, Any]:
    """One request as the API shows it; without ``raw_text`` (``access.raw_text_allowed``) its
    prompt, messages, tools, response format and metadata (references) are the placeholder."""
    shown = functools.partial(raw_text_shown, allowed=raw_text)
    return {
        "position": r.position,
        "id": r.request_id,
        "arrival_s": r.arrival_s,
        "prompt": shown(r.prompt),
        "messages": shown(r.messages),
        "max_tokens": r.max_tokens,
        "temperature": r.temperature,
        "top_p": r.top_p,
        "seed": r.seed,
        "task": r.task,
        "class": r.traffic_class,
        "response_format": shown(r.response_format),
        "tools": shown(r.tools),
        "metadata": shown(r.metadata),
        "prompt_tokens": r.prompt_tokens,
        "split": r.split,
        "session_id": r.session_id or r.request_id,
        "turn": r.turn,
        "think_time_s": r.think_time_s,
    }
