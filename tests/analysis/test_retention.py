"""Raw text retention (issue 24): past the retention period a trace's prompts, messages, reference
answers and model outputs are purged from every table, while the decision built on it still
verifies and every page still renders, saying the text was purged."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from console.analysis.models import ComparisonCache, RawTextPurge
from console.analysis.retention import raw_text_purge_due, trace_purged
from console.analysis.selectors import comparison_summary_for_experiment
from console.analysis.services import comparison_refresh
from console.decisions import services
from console.decisions.models import ArchiveRecord
from console.experiments.services import ExperimentInvalid, experiment_create
from console.results.models import RequestResult, RunResultsPack
from console.results.services import results_packs_store
from console.traces.models import RAW_TEXT_PURGED_KEY, Trace, TraceRequest
from console.traces.services import trace_import
from tests.support.stored import stored_anywhere
from tests.support.synthetic import TASKS, experiment_synthesize
from tests.test_page_numbers import findings, visible_text
from workers import tasks

pytestmark = pytest.mark.django_db

MARKERS = ("zzq-prompt-marker", "zzq-msg-marker", "zzq-tool-marker", "zzq-ref-marker", "zzq-out-marker")
FRESH = "zzq-fresh-marker"
DAYS = 30


def _plant(trace: Trace) -> None:
    """Markers in prompts, chat messages (a tool's output among them), metadata references and outputs."""
    for tr in trace.requests.order_by("position"):
        if tr.position % 3 == 0:
            tr.prompt = None
            tr.messages = [
                {"role": "user", "content": f"zzq-msg-marker {tr.position}"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"function": {"arguments": "zzq-msg-marker"}}],
                },
                {"role": "tool", "content": "zzq-tool-marker result"},
            ]
        else:
            tr.prompt = f"zzq-prompt-marker {tr.position}"
        tr.metadata = {"reference": "zzq-ref-marker 42", "grading": {"notes": ["zzq-ref-marker"]}, "score": 3}
        tr.save()
    for r in RequestResult.objects.filter(trace_request__trace=trace):
        r.output_text = f"zzq-out-marker {r.pk} " + r.output_text
        r.save(update_fields=["output_text"])


@pytest.fixture
def world(engineer, approver, settings):
    """A finished synthetic experiment with planted markers, its comparison and packs, and a
    signed, archived decision; its trace imported 40 days ago; another trace imported today."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.SPECREVIEW_RAW_TEXT_RETENTION_DAYS = DAYS
    experiment = experiment_synthesize(n_requests=12, ks=(4,), loads="1x", repeats=1, name="retention")
    _plant(experiment.trace)
    results_packs_store(experiment=experiment)
    comparison_refresh(experiment_id=experiment.pk, n_boot=50)
    summary = comparison_summary_for_experiment(experiment=experiment)
    decision = services.decision_create(
        experiment=experiment, author=engineer, title="Turn on n-gram", proposal="enable",
        candidate_arm=experiment.arms.exclude(label="baseline").get(), traffic_class="interactive",
        comparison=summary,
    )  # fmt: skip
    decision = services.decision_update(
        decision=decision,
        actor=engineer,
        changes={
            "rationale": "latency first",
            "checklist_answers": {
                k: {"answer": "yes"}
                for k in ("production_traces", "current_serving_path", "framework_compatibility")
            },
            "rollback_owner": "serving on-call",
            "rollback_verification": "p95 back within 15 min",
        },
    )
    decision = services.decision_submit(decision=decision, actor=engineer)
    decision = services.decision_sign(
        decision=decision, signer=approver, verdict="approved", comment="ok", override_reason="accepted risk"
    )
    Trace.objects.filter(pk=experiment.trace_id).update(
        created_at=timezone.now() - dt.timedelta(days=DAYS + 10)
    )
    fresh = Trace.objects.create(name="fresh", sha256="f" * 64, source_format="jsonl", request_count=1)
    TraceRequest.objects.create(
        trace=fresh, position=0, request_id="f0", arrival_s=0.0, prompt=FRESH, max_tokens=8, split="train"
    )
    return experiment, decision, fresh


def _pages(experiment, decision) -> list[str]:
    run = experiment.runs.order_by("pk").first()
    a, b = (
        RequestResult.objects.filter(run__experiment=experiment)
        .order_by("pk")
        .values_list("pk", flat=True)[:2]
    )
    return [
        f"/traces/{experiment.trace_id}/",
        f"/experiments/{experiment.pk}/",
        f"/analysis/experiments/{experiment.pk}/",
        f"/analysis/runs/{run.pk}/",
        f"/analysis/results/{a}/vs/{b}/",
        f"/decisions/{decision.pk}/",
    ]


def test_the_planted_markers_are_stored_before_the_purge(world):
    """The search below can fail: before the purge each marker is where it was planted."""
    experiment, _, _ = world
    hits = {m: stored_anywhere(m) for m in MARKERS}
    assert "traces_tracerequest.prompt" in hits["zzq-prompt-marker"]
    assert "traces_tracerequest.messages" in hits["zzq-msg-marker"]
    assert "traces_tracerequest.messages" in hits["zzq-tool-marker"]
    assert "traces_tracerequest.metadata" in hits["zzq-ref-marker"]
    assert hits["zzq-out-marker"] == ["analysis_comparisoncache.data", "analysis_requestresult.output_text"]
    pack = RunResultsPack.objects.filter(run__experiment=experiment).first()
    assert b"zzq-out-marker" in bytes(pack.data)


def test_after_the_purge_no_raw_text_remains_and_the_decision_still_verifies(world, approver_client):
    experiment, decision, fresh = world
    cache = ComparisonCache.objects.get(experiment=experiment)
    before_key, before_quality = cache.key, cache.data["quality"]
    bundle = ArchiveRecord.objects.get(decision=decision).bundle

    out = io.StringIO()
    call_command("purge_raw_text", "--dry-run", stdout=out)
    assert f"would purge trace {experiment.trace_id} (" in out.getvalue()
    assert "12 requests, 24 results, 1 comparisons" in out.getvalue()
    assert stored_anywhere("zzq-prompt-marker") != []  # a dry run changes nothing
    assert not RawTextPurge.objects.exists()

    out = io.StringIO()
    call_command("purge_raw_text", stdout=out)
    assert "1 traces purged" in out.getvalue()

    for marker in MARKERS:
        assert stored_anywhere(marker) == [], marker
    for pack in RunResultsPack.objects.filter(run__experiment=experiment):
        assert b"zzq-out-marker" not in bytes(pack.data)
    # what the verdict needs is kept
    cache.refresh_from_db()
    assert cache.key == before_key
    kept = {k: v for k, v in cache.data["quality"].items() if k != "first_divergences"}
    assert kept == {k: v for k, v in before_quality.items() if k != "first_divergences"}
    assert len(cache.data["quality"]["first_divergences"]) == len(before_quality["first_divergences"]) > 0
    assert ArchiveRecord.objects.get(decision=decision).bundle == bundle  # the archive holds no raw text
    row = RequestResult.objects.filter(run__experiment=experiment).order_by("pk").first()
    assert (
        row.output_text == ""
        and row.num_output_tokens > 0
        and len(row.output_token_ids) == row.num_output_tokens
    )
    tr = experiment.trace.requests.get(position=0)
    assert [m["role"] for m in tr.messages] == ["user", "assistant", "tool"] and tr.metadata["score"] == 3
    call_command("verify_archive", stdout=io.StringIO())

    mark = trace_purged(trace=Trace.objects.get(pk=experiment.trace_id))
    assert mark["after_days"] == DAYS and mark["requests"] == 12 and mark["results"] == 24
    record = RawTextPurge.objects.get()
    assert (record.trace_ref, record.retention_days, record.requests_purged, record.results_purged) == (
        experiment.trace_id, DAYS, 12, 24,
    )  # fmt: skip
    assert record.actor.startswith("command purge_raw_text (") and record.comparisons_purged == 1
    with pytest.raises(ValueError, match="append-only"):
        record.save()

    allowed = set(TASKS) | {"interactive", "batch"} | set(experiment.arms.values_list("label", flat=True))
    for path in _pages(experiment, decision):
        response = approver_client.get(path)
        assert response.status_code == 200, path
        html = response.content.decode()
        assert f"Raw text purged on {mark['on']} after {DAYS} days" in html, path
        assert findings(visible_text(html), allowed) == [], path  # one way to show a number (issue 22)

    # a trace inside its period is untouched
    assert TraceRequest.objects.get(trace=fresh).prompt == FRESH
    assert trace_purged(trace=fresh) is None


def test_the_daily_task_purges_once_and_a_second_purge_changes_nothing(world):
    experiment, _, _ = world
    assert tasks.raw_text_purge() == "1"
    record = RawTextPurge.objects.get()
    assert record.actor == "task workers.raw_text_purge"
    snapshot = list(TraceRequest.objects.filter(trace=experiment.trace).values())
    assert tasks.raw_text_purge() == "0"
    assert raw_text_purge_due(actor="test") == []
    assert RawTextPurge.objects.count() == 1
    assert list(TraceRequest.objects.filter(trace=experiment.trace).values()) == snapshot


def test_without_a_retention_period_nothing_is_purged(world, settings):
    settings.SPECREVIEW_RAW_TEXT_RETENTION_DAYS = None
    out = io.StringIO()
    call_command("purge_raw_text", stdout=out)
    assert "kept for ever" in out.getvalue() and "0 traces purged" in out.getvalue()
    assert stored_anywhere("zzq-prompt-marker") == ["traces_tracerequest.prompt"]
    assert not RawTextPurge.objects.exists()


def test_the_purge_record_is_append_only_in_the_database(world):
    tasks.raw_text_purge()
    with pytest.raises(Exception, match="append-only"), connection.cursor() as cur:
        cur.execute("UPDATE analysis_rawtextpurge SET actor = 'someone else'")


def test_a_comparison_page_rendered_before_the_purge_is_not_served_from_its_cache_after(
    world, approver_client
):
    experiment, _, _ = world
    path = f"/analysis/experiments/{experiment.pk}/"
    assert "zzq-out-marker" in approver_client.get(path).content.decode()  # the body is cached now
    raw_text_purge_due(actor="test")
    body = approver_client.get(path).content.decode()
    assert "zzq-out-marker" not in body and "Raw text purged on" in body


def test_a_purged_trace_refuses_a_new_experiment_and_its_file_imports_anew(world, engineer):
    experiment, _, _ = world
    raw_text_purge_due(actor="test")
    trace = Trace.objects.get(pk=experiment.trace_id)
    with pytest.raises(ExperimentInvalid) as refused:
        experiment_create(
            name="again", trace=trace, target_model="smollm2-135m",
            candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}],
        )  # fmt: skip
    assert "prompts were purged on" in str(refused.value.errors["trace"])


def test_the_file_of_a_purged_trace_imports_anew(settings):
    settings.SPECREVIEW_RAW_TEXT_RETENTION_DAYS = DAYS
    content = b'{"id": "a", "arrival_s": 0, "prompt": "the same file twice", "max_tokens": 4}\n'
    first = trace_import(file=io.BytesIO(content), name="t", uploaded_by=None, filename="t.jsonl")
    assert not trace_import(file=io.BytesIO(content), name="t", uploaded_by=None, filename="t.jsonl").created
    Trace.objects.filter(pk=first.trace.pk).update(created_at=timezone.now() - dt.timedelta(days=DAYS + 1))
    raw_text_purge_due(actor="test")
    again = trace_import(file=io.BytesIO(content), name="t", uploaded_by=None, filename="t.jsonl")
    assert again.created and again.trace.pk != first.trace.pk
    assert again.trace.requests.get().prompt == "the same file twice"
    assert RAW_TEXT_PURGED_KEY in Trace.objects.get(pk=first.trace.pk).metadata
