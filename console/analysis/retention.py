"""Raw text retention (issue 24): after a trace's retention period its raw text is purged, and
everything the verdict needs stays, so archived decisions still verify and their pages render.

Purged (blanked in place, the rows kept):
- ``TraceRequest.prompt`` (to ""), each of ``TraceRequest.messages``' messages (to its role and an
  empty ``content``: user, assistant and tool-output text, tool-call arguments), and every string
  value, at any depth, of ``TraceRequest.metadata`` (reference answers, labels, notes);
- ``RequestResult.output_text`` of every run on the trace, and the run's results pack (packed
  again from the blanked rows);
- the stored comparison's first divergences (``context``, ``baseline_text``, ``candidate_text``):
  their positions, counts and ids stay, and the comparison's key is unchanged, so nothing
  recomputes it.

Kept: ids, arrival times, token counts, output token ids (``RequestResult.output_token_ids``),
chunk times and sizes, drafted/accepted counts, validity flags, finish reasons, errors,
``response_format`` and ``tools`` (schemas, not traffic), task and traffic class, every hash
(``Trace.sha256`` and ``content_sha256`` prove what was there), metrics, comparisons' numbers,
decisions and archived bundles (never touched: the bundle holds no raw text).

Each purge marks the trace (``Trace.metadata["raw_text_purged"]``: date, days, row counts), so
pages say so instead of showing empty strings, and writes an append-only ``RawTextPurge`` record.
A purge is idempotent: it blanks in batches, each its own transaction, and marks the trace last,
so a purge cut short is finished by the next one.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console.analysis.models import ComparisonCache, RawTextPurge
from console.analysis.raw_text import DIVERGENCE_TEXT_FIELDS
from console.results.models import RequestResult, RunResultsPack
from console.results.services import results_pack_store
from console.traces.models import RAW_TEXT_PURGED_KEY, Trace, TraceRequest

BATCH_SIZE = 2000
PURGED_KEY = RAW_TEXT_PURGED_KEY


@dataclass(frozen=True)
class TracePurge:
    """What a purge of one trace did (or, in a dry run, would do): row counts."""

    trace_id: int
    trace_name: str
    retention_days: int
    imported_at: dt.datetime
    requests: int
    results: int
    comparisons: int


def retention_days_for(*, trace: Trace) -> int | None:
    """Days after import that ``trace``'s raw text is kept; None keeps it for ever. The owning
    team's period (``Team.raw_text_retention_days``) when it set one, else the installation's
    ``SPECREVIEW_RAW_TEXT_RETENTION_DAYS``."""
    team_days = trace.team.raw_text_retention_days
    return team_days if team_days is not None else settings.SPECREVIEW_RAW_TEXT_RETENTION_DAYS


def trace_purged(*, trace: Trace) -> dict[str, Any] | None:
    """The purge mark of ``trace`` ({"on", "at", "after_days", ...}), or None if its text is kept."""
    mark = (trace.metadata or {}).get(PURGED_KEY)
    return mark if isinstance(mark, dict) else None


def traces_purge_due(*, now: dt.datetime) -> list[tuple[Trace, int]]:
    """The traces, not purged yet, imported more than their retention period before ``now``,
    each with its period (days), oldest first."""
    due = []
    traces = Trace.objects.exclude(metadata__has_key=PURGED_KEY).select_related("team")
    for trace in traces.order_by("created_at", "pk"):
        days = retention_days_for(trace=trace)
        if days is not None and trace.created_at <= now - dt.timedelta(days=days):
            due.append((trace, days))
    return due


def _blank_strings(value: Any) -> Any:
    if isinstance(value, str):
        return ""
    if isinstance(value, dict):
        return {k: _blank_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_blank_strings(v) for v in value]
    return value


def _message_blank(message: Any) -> Any:
    if not isinstance(message, dict):
        return _blank_strings(message)
    return {"role": message.get("role", ""), "content": ""}


def _requests_blank(*, trace_id: int) -> int:
    """Blank the trace's requests in batches of ``BATCH_SIZE`` rows (one transaction each)."""
    done, last = 0, 0
    while True:
        with transaction.atomic():
            batch = list(
                TraceRequest.objects.filter(trace_id=trace_id, pk__gt=last)
                .order_by("pk")
                .only("pk", "prompt", "messages", "metadata")[:BATCH_SIZE]
            )
            if not batch:
                return done
            for row in batch:
                row.prompt = None if row.prompt is None else ""
                row.messages = None if row.messages is None else [_message_blank(m) for m in row.messages]
                row.metadata = _blank_strings(row.metadata or {})
            TraceRequest.objects.bulk_update(batch, ["prompt", "messages", "metadata"])
        done += len(batch)
        last = batch[-1].pk


def _results_blank(*, trace_id: int) -> int:
    """Blank the output text of every result on the trace, in batches; then pack each run again."""
    rows = RequestResult.objects.filter(trace_request__trace_id=trace_id)
    done, last = 0, 0
    while True:
        with transaction.atomic():
            ids = list(rows.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:BATCH_SIZE])
            if not ids:
                break
            done += RequestResult.objects.filter(pk__in=ids).update(output_text="")
        last = ids[-1]
    packed = RunResultsPack.objects.filter(run__experiment__trace_id=trace_id).values_list(
        "run_id", flat=True
    )
    for run_id in list(packed):
        with transaction.atomic():
            results_pack_store(run_id=run_id)
    return done


def _comparisons_blank(*, trace_id: int) -> int:
    """Blank the first divergences' text in the stored comparisons of the trace's experiments,
    keeping every other value (and the key, so nothing recomputes)."""
    done = 0
    for cache in ComparisonCache.objects.filter(experiment__trace_id=trace_id).order_by("pk"):
        quality = (cache.data or {}).get("quality")
        if not isinstance(quality, dict) or not quality.get("first_divergences"):
            continue
        quality["first_divergences"] = [
            {k: "" if k in DIVERGENCE_TEXT_FIELDS else v for k, v in d.items()} if isinstance(d, dict) else d
            for d in quality["first_divergences"]
        ]
        ComparisonCache.objects.filter(pk=cache.pk).update(data=cache.data)
        done += 1
    return done


def trace_raw_text_purge(*, trace: Trace, days: int, actor: str, now: dt.datetime) -> TracePurge:
    """Purge ``trace``'s raw text (module docstring), mark it and write the audit record."""
    requests = _requests_blank(trace_id=trace.pk)
    results = _results_blank(trace_id=trace.pk)
    comparisons = _comparisons_blank(trace_id=trace.pk)
    with transaction.atomic():
        locked = Trace.objects.select_for_update().get(pk=trace.pk)
        locked.metadata = (locked.metadata or {}) | {
            PURGED_KEY: {
                "on": timezone.localdate(now).isoformat(),
                "at": now.isoformat(),
                "after_days": days,
                "requests": requests,
                "results": results,
            }
        }
        locked.save(update_fields=["metadata"])
        RawTextPurge.objects.create(
            trace_ref=trace.pk,
            trace_name=trace.name[:200],
            trace_content_sha256=trace.content_sha256,
            actor=actor[:200],
            retention_days=days,
            requests_purged=requests,
            results_purged=results,
            comparisons_purged=comparisons,
            at=now,
        )
    trace.metadata = locked.metadata
    return TracePurge(trace.pk, trace.name, days, trace.created_at, requests, results, comparisons)


def raw_text_purge_due(
    *, actor: str, dry_run: bool = False, now: dt.datetime | None = None
) -> list[TracePurge]:
    """Purge every trace past its retention period (``traces_purge_due``); with ``dry_run``, only
    count what would be purged. Returns one entry per trace."""
    now = now or timezone.now()
    out = []
    for trace, days in traces_purge_due(now=now):
        if dry_run:
            out.append(
                TracePurge(
                    trace.pk,
                    trace.name,
                    days,
                    trace.created_at,
                    TraceRequest.objects.filter(trace=trace).count(),
                    RequestResult.objects.filter(trace_request__trace=trace).count(),
                    ComparisonCache.objects.filter(experiment__trace=trace).count(),
                )
            )
        else:
            out.append(trace_raw_text_purge(trace=trace, days=days, actor=actor, now=now))
    return out
