"""docs/ci.md's pipeline end to end over the JSON API alone, through a real Celery worker: an
engineer's token uploads a trace, runs an experiment against the local scripted server, waits for
its comparison, fits a slice policy, drafts, completes and submits a decision; two approvers'
tokens sign it; the engineer's token starts a guarded rollout, pauses and stops it, and exports
the decision's triggers for Argo Rollouts. The database is read only to check what was stored."""

from __future__ import annotations

import json
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from console.decisions.models import ArchiveRecord
from console.rollouts.models import Rollout
from tests.decisions.conftest import ENGINEER_ANSWERS
from tests.experiments.factories import script_prompt

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

REQUESTS = 24  # enough train requests per slice for a fit with min_support 2


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def server(openai_register):
    """Autouse, so it is registered before celery_worker_proc starts the worker."""
    from tests.support.stream_server import stream_server_start

    srv = stream_server_start()
    openai_register(srv.base_url, name="scripted")
    yield srv
    srv.stop()


@pytest.fixture
def prometheus(settings):
    """Registered but never asked here: nothing evaluates the rollout in this test."""
    settings.SPECREVIEW_PROMETHEUS = {"prod": {"url": "http://127.0.0.1:9", "bearer_token_file": ""}}
    return "prod"


def call(client, method, url, body, headers):
    data = {} if body is None else {"data": json.dumps(body), "content_type": "application/json"}
    return getattr(client, method)(url, **data, **headers)


def poll(fetch, *, until, timeout: float, what: str):
    """The last response of ``fetch()`` once ``until(response)`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        response = fetch()
        if until(response):
            return response
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}: {response.content[:500]!r}")
        time.sleep(0.3)


def _trace_file() -> SimpleUploadedFile:
    rows = [
        {
            "id": f"r{i}",
            "arrival_s": round(i * 0.03, 3),
            "prompt": script_prompt(ttft_s=0.01 + 0.001 * (i % 4), gap_s=0.005, tokens=4),
            "max_tokens": 4,
            "class": "interactive",
            "task": ("chat", "code")[i % 2],
        }
        for i in range(REQUESTS)
    ]
    return SimpleUploadedFile("ci.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())


def test_the_ci_pipeline_runs_end_to_end_over_the_api(
    client, celery_worker_proc, engineer, approver, second_approver, api_token_for, prometheus
):
    eng = api_token_for(engineer)

    # 1. the trace
    uploaded = client.post("/api/traces", {"file": _trace_file(), "name": "ci", "holdout": "0.25"}, **eng)
    assert uploaded.status_code == 201, uploaded.content
    trace = uploaded.json()["trace"]
    assert uploaded.json()["created"] and trace["request_count"] == REQUESTS

    # 2. the experiment: a baseline and one n-gram candidate, two repeats (the A/A floor), started
    body = {
        "trace": trace["id"],
        "name": "ci flow",
        "target_model": "scripted",
        "engine": "openai",
        "baseline_engine_args": {"server": "scripted", "endpoint": "completions"},
        "candidates": [{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}],
        "load_levels": "1x",
        "repeats": 2,
        "warmup": 0,
        "endpoints": {"promised_class": "interactive", "primary_metric": "tpot_s", "primary_stat": "p95"},
    }
    created = call(client, "post", "/api/experiments", body, eng)
    assert created.status_code == 201, created.content
    experiment = created.json()
    runs = {r["status"] for r in experiment["runs"]}
    assert len(experiment["runs"]) == 2 * 2 and runs <= {"queued", "running"}, runs
    eid = experiment["id"]
    assert experiment["status"] in ("running", "done"), experiment["status"]  # what the start made of it
    [candidate] = [a["label"] for a in experiment["arms"] if not a["baseline"]]

    # 3. wait for its runs, then for the comparison the worker computes after the last one
    done = poll(
        lambda: client.get(f"/api/experiments/{eid}", **eng),
        until=lambda r: r.status_code != 200 or r.json()["status"] in ("done", "failed", "cancelled"),
        timeout=60,
        what="experiment done",
    )
    assert done.status_code == 200 and done.json()["status"] == "done", done.content
    assert {r["status"] for r in done.json()["runs"]} == {"done"}
    compared = poll(
        lambda: client.get(f"/api/experiments/{eid}/comparison", **eng),
        until=lambda r: r.status_code != 409,
        timeout=60,
        what="comparison stored",
    )
    assert compared.status_code == 200, compared.content
    comparison = compared.json()
    assert comparison["state"] == "ready"
    assert {row["arm"] for row in comparison["headline"]} == {"baseline", candidate}
    floors = [r for r in comparison["noise_floor"] if r["metric"] == "tpot_s" and r["dimension"] is None]
    assert floors and all(r["n_repeats"] == 2 and r["noise_floor"] is not None for r in floors), floors

    # 4. a slice policy, then the decision drafted from both, completed and submitted
    fitted = call(client, "post", "/api/policies", {"experiment": eid, "load": "all", "min_support": 2}, eng)
    assert fitted.status_code == 201, fitted.content
    policy = fitted.json()
    assert policy["experiment_id"] == eid and len(policy["rules_sha256"]) == 64
    draft = {
        "experiment": eid,
        "proposal": "enable_for_slice",
        "traffic_class": "interactive",
        "candidate_arm": candidate,
        "slice_policy": policy["id"],
        "approvals_required": 2,
    }
    drafted = call(client, "post", "/api/decisions", draft, eng)
    assert drafted.status_code == 201, drafted.content
    decision = drafted.json()
    assert decision["status"] == "draft" and decision["gate"]["criteria"]
    # The checklist is not answered yet: the gate cannot pass (it fails if a criterion fails).
    assert decision["gate"]["overall"] in ("incomplete", "fail"), decision["gate"]["overall"]
    assert decision["approvals_required"] == 2 and decision["approvals_count"] == 0
    assert decision["policy_ref"] == f"/policies/{policy['id']}/"
    url = f"/api/decisions/{decision['id']}"
    patch = {
        "rationale": "p95 TPOT on interactive traffic, measured by CI",
        "checklist_answers": {
            k: v | {"note": "answered by the CI pipeline"} for k, v in ENGINEER_ANSWERS.items()
        },
        "rollback_owner": "serving on-call",
        "rollback_verification": "p95 TPOT back within 15 min",
    }
    patched = call(client, "patch", url, patch, eng)
    assert patched.status_code == 200, patched.content
    submitted = call(client, "post", f"{url}/submit", None, eng)
    assert submitted.status_code == 200, submitted.content
    assert submitted.json()["status"] == "submitted"
    gate = submitted.json()["gate"]
    assert gate["overall"] in ("pass", "fail", "incomplete") and gate["criteria"], gate

    # 5. two approvers sign; over a gate that does not pass, each gives a reason
    sign = {"verdict": "approved", "comment": "read the gate"}
    if gate["overall"] != "pass":
        sign["override_reason"] = "a scripted server: the gate is not the point of this run"
    first = call(client, "post", f"{url}/signoff", sign, api_token_for(approver))
    assert first.status_code == 200, first.content
    one = first.json()
    assert one["status"] == "submitted" and (one["approvals_count"], one["approvals_required"]) == (1, 2)
    assert one["archive"] is None
    second = call(client, "post", f"{url}/signoff", sign, api_token_for(second_approver))
    assert second.status_code == 200, second.content
    two = second.json()
    assert two["status"] == "approved" and two["approvals_count"] == 2 and two["archive"]["sequence"] >= 1
    assert [s["signer"] for s in two["signoffs"]] == ["alex-approver", "sam-approver"]
    assert ArchiveRecord.objects.filter(decision_id=decision["id"]).exists()

    # 6. a guarded rollout: started, read, paused, stopped (archived); the Argo export
    start = {
        "prometheus": prometheus,
        "candidate_pool": 'pool="spec"',
        "control_pool": 'pool="baseline"',
        "stages": [{"share": 5, "minutes": 30}, {"share": 50, "minutes": 60}],
    }
    started = call(client, "post", f"{url}/rollouts", start, eng)
    assert started.status_code == 201, started.content
    rollout = started.json()
    assert (
        rollout["decision_id"] == decision["id"] and rollout["state"] == "running" and rollout["stage"] == 0
    )
    assert rollout["triggers"], "the decision's default triggers travel with the rollout"
    read = client.get(f"/api/rollouts/{rollout['id']}", **eng)
    assert read.status_code == 200 and read.json()["state"] == "running", read.content
    assert [e["action"] for e in read.json()["events"]] == ["started"]
    paused = call(client, "post", f"/api/rollouts/{rollout['id']}/pause", {"reason": "CI check"}, eng)
    assert paused.status_code == 200 and paused.json()["state"] == "paused", paused.content
    stopped = call(client, "post", f"/api/rollouts/{rollout['id']}/stop", {"reason": "CI flow done"}, eng)
    assert stopped.status_code == 200 and stopped.json()["state"] == "stopped", stopped.content
    assert Rollout.objects.get(pk=rollout["id"]).archive_sha256
    exported = client.get(f"{url}/rollout-export?tool=argo", **eng)
    assert exported.status_code == 200, exported.content
    export = exported.json()
    assert export["tool"] == "argo" and "AnalysisTemplate" in export["yaml"]
    assert any(d.get("kind") == "AnalysisTemplate" for d in export["documents"])
