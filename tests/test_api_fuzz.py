"""schemathesis against the served /api/openapi.json: every operation, every role's token, data that
fits the schema and data that does not. No 5xx, and every response is one the document declares
(status, content type, body schema); data the schema forbids is refused with a 4xx.

The app is called in-process through its WSGI handler, in the test's transaction; each example runs
in a savepoint that is rolled back, so one example's rows never leak into the next.
"""

from __future__ import annotations

import json
import os

import pytest
import schemathesis
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
# Small on purpose: 15 operations x 3 roles x 2 modes at 20 examples took 80 s wall (about 60 s
# of CPU) on the shared 2-core machine; SPECREVIEW_FUZZ_EXAMPLES=100 for a deeper run.
EXAMPLES = int(os.environ.get("SPECREVIEW_FUZZ_EXAMPLES", "20"))
# Operations whose {id} half the valid examples aim at a seeded row (a random id is all but
# always a 404, and the rollouts' bodies are read only past it): the path -> the seeded key.
AIMED = {
    "/api/decisions/{id}/rollouts": "signed",
    "/api/decisions/{id}/rollout-export": "signed",
    "/api/rollouts/{id}": "rollout",
    "/api/rollouts/{id}/pause": "rollout",
    "/api/rollouts/{id}/resume": "rollout",
    "/api/rollouts/{id}/stop": "rollout",
    "/api/rollouts/{id}/rolled-back": "rollout",
}


@pytest.fixture
def seeded(engineer, approver, monkeypatch, settings):
    """One of each thing the API reads, so detail operations answer 200 as well as 404: a draft,
    a signed decision with a rollout running and a signed one with none (``signed_idle``)."""
    from console.decisions import selectors as decision_selectors
    from console.rollouts import services as rollouts
    from tests.decisions.conftest import draft_make, signed_make
    from tests.decisions.factories import experiment_make, summary_make, summary_passing
    from tests.experiments.factories import trace_make
    from tests.support.world import WORLD_PROMETHEUS

    settings.SPECREVIEW_PROMETHEUS = WORLD_PROMETHEUS  # registered, never queried here
    monkeypatch.setattr(decision_selectors, "decision_comparison", lambda *, experiment: summary_make(summary_passing()))
    trace = trace_make(prompts=["a", "b", "c"])
    experiment = experiment_make(created_by=engineer)
    decision = draft_make(experiment=experiment, author=engineer)
    signed, idle = (signed_make(experiment=experiment, author=engineer, signer=approver) for _ in range(2))
    rollout = rollouts.rollout_start(
        decision=signed, actor=engineer, prometheus="world", candidate_pool='pool="speculative"',
        control_pool='pool="baseline"', stages=[{"share": 10, "minutes": 30}, {"share": 100, "minutes": 60}],
    )
    return {
        "trace": trace.pk,
        "experiment": experiment.pk,
        "decision": decision.pk,
        "signed": signed.pk,
        "signed_idle": idle.pk,
        "rollout": rollout.pk,
    }


def _headers(api_token_for, user) -> dict[str, str]:
    return {"Authorization": api_token_for(user)["HTTP_AUTHORIZATION"]}


def _schema(app, headers):
    return schemathesis.openapi.from_wsgi("/api/openapi.json", app, headers=headers)


def _aimed_at(pk: int):
    def aim(case):
        case.path_parameters = {**(case.path_parameters or {}), "id": pk}
        return case

    return aim


def _call(case) -> int:
    with transaction.atomic():
        try:
            return case.call_and_validate(checks=CHECKS).status_code
        finally:
            transaction.set_rollback(True)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("role", ["viewer", "engineer", "approver"])
def test_it_survives_schemathesis_on_every_operation(role, request, wsgi_app, seeded, api_token_for):
    headers = _headers(api_token_for, request.getfixturevalue(role))
    schema = _schema(wsgi_app, headers)
    operations = [result.ok() for result in schema.get_all_operations()]
    # 20th, 21st: POST /api/decisions and /api/decisions/{id}/submit (issue 25); 22nd to 29th: the
    # rollouts' (start, list, read, pause, resume, stop, rolled-back, export)
    assert len(operations) == 29
    seen: set[int] = set()
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode, headers=headers)
            if mode is GenerationMode.POSITIVE and operation.path in AIMED:
                # a negative case's {id} may be what is negated: only valid cases are aimed
                strategy = st.one_of(strategy, strategy.map(_aimed_at(seeded[AIMED[operation.path]])))

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=strategy)
            def run(case):
                seen.add(_call(case))

            try:
                run()
            except Unsatisfiable:
                # An operation with nothing to negate (no parameters, no body) has no negative data.
                assert mode is GenerationMode.NEGATIVE
    # Every case carried the role's token: a 401 would mean the fuzzing never got past the door.
    assert 401 not in seen and {200, 400, 404} <= seen, seen


def test_it_answers_the_seeded_rows_as_the_document_says(wsgi_app, seeded, approver, api_token_for):
    headers = _headers(api_token_for, approver)
    schema = _schema(wsgi_app, headers)
    reads = {
        "/api/traces/{id}": seeded["trace"],
        "/api/traces/{id}/requests": seeded["trace"],
        "/api/experiments/{id}": seeded["experiment"],
        "/api/experiments/{id}/comparison": seeded["experiment"],
        "/api/decisions/{id}": seeded["decision"],
    }
    statuses = {}
    for path, pk in reads.items():
        case = schema[path]["GET"].Case(path_parameters={"id": pk})
        with transaction.atomic():
            response = case.call_and_validate(headers=headers, checks=CHECKS)
        statuses[path] = response.status_code
    for listing in ("/api/traces", "/api/experiments", "/api/decisions", "/api/policies"):
        response = schema[listing]["GET"].Case().call_and_validate(headers=headers, checks=CHECKS)
        statuses[listing] = response.status_code
    assert statuses == {path: 200 for path in statuses} | {"/api/experiments/{id}/comparison": 409}


# Hostile input to the rollouts' operations, each refused with a 4xx (never a 5xx, never a 2xx):
# PromQL smuggled into a pool selector, non-finite and huge numbers (JSON's NaN and Infinity
# tokens, an integer of 400 digits), reasons far over the limit, arguments a tool would refuse.
_START = {
    "prometheus": "world",
    "candidate_pool": 'pool="speculative"',
    "control_pool": 'pool="baseline"',
    "stages": [{"share": 10, "minutes": 30}],
}
_INJECTIONS = (
    'pool="a"} or vector(1)',
    'pool="a"}) or vector(1) #',
    'pool=~".*"} or on() vector(1) or up{a="b"',
    'pool="a"\npool="b"',
    '__name__="up"',
    'pool="a",',
    'pool="\\"',
    "pool='a'",
    'pool="' + "x" * 495 + '"',
    "",
    " ",
)
_NUMBERS = (float("nan"), float("inf"), float("-inf"), 10**400, -(10**400), 1e308, -1, 0, "10", True, None, [10])
HOSTILE_STARTS = (
    [_START | {"candidate_pool": pool} for pool in _INJECTIONS]
    + [_START | {"control_pool": 'pool="a"} or vector(1)'}, _START | {"control_pool": 'pool="speculative"'}]
    + [_START | {"stages": [{"share": n, "minutes": 30}]} for n in _NUMBERS]
    + [_START | {"stages": [{"share": 10, "minutes": n}]} for n in _NUMBERS]
    + [_START | {"alpha": n} for n in (*_NUMBERS, 0.2000001, 5e-324)]
    + [
        _START | {"stages": []},
        _START | {"stages": [{"share": 10, "minutes": 1}] * 21},
        _START | {"stages": [{"share": 50, "minutes": 1}, {"share": 10, "minutes": 1}]},
        _START | {"stages": [{"share": 10}]},
        _START | {"stages": [{"share": 10, "minutes": 1, "extra": 1}]},
        _START | {"stages": [[10, 30]]},
        _START | {"stages": "10:30"},
        _START | {"prometheus": "nowhere"},
        _START | {"prometheus": "x" * 10_000},
        _START | {"prometheus": "world\x00"},
        _START | {"unknown": 1},
        {k: v for k, v in _START.items() if k != "stages"},
    ]
)
LONG_REASON = "r" * 10_000


def _api(client, method: str, url: str, headers: dict[str, str], body: str | None = None):
    with transaction.atomic():
        try:
            if body is None:
                return getattr(client, method)(url, **headers)
            return getattr(client, method)(url, data=body, content_type="application/json", **headers)
        finally:
            transaction.set_rollback(True)


def test_it_refuses_hostile_rollout_input_with_a_4xx(seeded, engineer, api_token_for):
    """An engineer of the team (allowed to operate): every refusal is a 4xx naming the input."""
    from django.test import Client

    from console.rollouts.models import Rollout

    client = Client(raise_request_exception=False)  # every answer, 5xx included, to list them all
    headers = api_token_for(engineer)
    start = f"/api/decisions/{seeded['signed_idle']}/rollouts"
    rollout = f"/api/rollouts/{seeded['rollout']}"
    export = f"/api/decisions/{seeded['signed']}/rollout-export"
    calls = [("post", start, json.dumps(body)) for body in HOSTILE_STARTS]  # NaN, Infinity as JSON's tokens
    calls += [
        ("post", start, '{"prometheus": "world", "candidate_pool": "pool=\\"a\\"", "control_pool": '
         '"pool=\\"b\\"", "stages": [{"share": 1e999, "minutes": 30}]}'),
        ("post", start, "{"),
        ("post", start, "[]"),
        ("post", start, '"' + "x" * 100_000 + '"'),
    ]
    for act in ("pause", "stop", "rolled-back"):
        calls += [
            ("post", f"{rollout}/{act}", json.dumps({"reason": LONG_REASON})),
            ("post", f"{rollout}/{act}", json.dumps({"reason": "x" * 2001})),
            ("post", f"{rollout}/{act}", json.dumps({"reason": "a\x00b"})),
            ("post", f"{rollout}/{act}", json.dumps({"reason": 7})),
            ("post", f"{rollout}/{act}", json.dumps({"reason": "x", "state": "completed"})),
        ]
    calls += [("post", f"{rollout}/{act}", json.dumps({"reason": "   "})) for act in ("stop", "rolled-back")]
    calls += [("post", f"{rollout}/resume", "{}")]  # running: nothing to resume (409)
    for bad in ("0", "-1", "99999999999999999999", "1.5", "x"):
        calls += [("get", f"/api/rollouts/{bad}", None), ("post", f"/api/rollouts/{bad}/pause", "{}")]
    queries = [
        "tool=helm",
        "",
        "tool=flagger&stages=nan:10",
        "tool=flagger&stages=inf:10",
        "tool=flagger&stages=1e400:10",
        "tool=flagger&stages=10:1e400",
        "tool=flagger&stages=10:nan",
        "tool=flagger&stages=-5:10",
        "tool=flagger&stages=0:0",
        "tool=flagger&stages=a:b",
        "tool=flagger&stages=,",
        "tool=flagger&stages=" + "10:10," * 100,
        "tool=flagger&stages=" + "9" * 399 + ":10",
        "tool=flagger&stages=50:10,10:10",
        "tool=flagger&namespace=Default!",
        "tool=flagger&namespace=" + "a" * 64,
        "tool=argo&prometheus_address=javascript:alert(1)",
        "tool=argo&prometheus_address=http://x%00",
        "tool=argo&prometheus_address=" + "h" * 10_000,
    ]
    calls += [("get", f"{export}?{q}", None) for q in queries]
    answered = {}
    for method, url, body in calls:
        response = _api(client, method, url, headers, body)
        answered[f"{method.upper()} {url[:80]} {(body or '')[:100]}"] = response.status_code
    wrong = {call: status for call, status in answered.items() if not 400 <= status < 500}
    assert not wrong, wrong
    assert Rollout.objects.get(pk=seeded["rollout"]).state == Rollout.State.RUNNING
    assert not Rollout.objects.filter(decision_id=seeded["signed_idle"]).exists()


def test_the_rollout_pages_refuse_hostile_input_without_an_error(client, seeded, engineer):
    """The same on the pages: the start form re-rendered with its errors (400), an act refused
    with a message (back to the page, nothing changed), an export refused (400) or not found."""
    from console.rollouts.models import Rollout

    client.force_login(engineer)
    base = f"/decisions/{seeded['signed']}/rollouts"
    new = f"/decisions/{seeded['signed_idle']}/rollouts/new/"
    form = {"prometheus": "world", "candidate_pool": 'pool="speculative"', "control_pool": 'pool="baseline"',
            "stages": "10:30", "alpha": "0.05"}
    posts = [form | {"candidate_pool": pool} for pool in _INJECTIONS]
    posts += [form | {"stages": s} for s in ("nan:10", "inf:10", "1e400:10", "10:1e400", "-1:10", "10:" + "9" * 300,
                                             "a:b", ",", "50:10,10:10", "10:10," * 30)]
    posts += [form | {"alpha": a} for a in ("nan", "inf", "0", "1e-400", "x")]
    posts += [form | {"prometheus": p} for p in ("nowhere", "world\x00", "x" * 10_000)]
    statuses = {}
    for data in posts:
        with transaction.atomic():
            statuses[f"new {data}"[:200]] = client.post(new, data).status_code
            transaction.set_rollback(True)
    acts = [{"act": "explode"}, {"act": "pause", "reason": LONG_REASON}, {"act": "stop"},
            {"act": "rolled_back", "reason": " "}, {"act": "resume"}, {"act": "stop", "reason": "a\x00b"}]
    for data in acts:
        response = client.post(f"{base}/{seeded['rollout']}/act/", data)
        statuses[f"act {data}"[:200]] = response.status_code
        assert Rollout.objects.get(pk=seeded["rollout"]).state == Rollout.State.RUNNING, data
    for query in ("stages=nan:10", "stages=1e400:10", "stages=10:1e400", "namespace=Default!",
                  "prometheus_address=javascript:alert(1)", "stages=" + "1:1," * 5000):
        statuses[f"flagger {query[:80]}"] = client.get(f"{base}/export/flagger.yaml?{query}").status_code
    statuses["helm"] = client.get(f"{base}/export/helm.yaml").status_code
    expected = {key: 302 if key.startswith("act") else 404 if key == "helm" else 400 for key in statuses}
    assert statuses == expected
