"""console/rollouts/views.py: the rollout page shows each trigger's last look (candidate, control,
observed) against its threshold with its state, and the decision page's rollouts card lists the
rollout with its state; the start form refuses hostile pools and bad stages naming the field; the
act form moves the state; the exports are YAML holding the triggers' queries."""

from __future__ import annotations

import time

import pytest
import yaml
from django.utils.html import escape

from console.decisions.words import trigger_condition
from console.rollouts import services
from console.rollouts.evaluation import rollout_evaluate
from console.rollouts.models import Look, Rollout
from console.rollouts.templatetags.rollouts_tags import observed, state_badge, value
from tests.decisions.conftest import draft_make, signed_make

pytestmark = pytest.mark.django_db

WINDOW_MIN = 0.05  # a look every 3 s: Prometheus scrapes every second
UNMEASURED = {
    "metric": "p99 TTFT (batch)",
    "op": ">",
    "threshold": 0.5,
    "unit": "s",
    "window_min": 10,
    "compare": "control",
    "min_samples": 3,
    "action": "pause",
}
VALID = {
    "prometheus": "test",
    "candidate_pool": 'pool="candidate"',
    "control_pool": 'pool="baseline"',
    "stages": "5:30, 25:60, 100:120",
    "alpha": "0.05",
}


@pytest.fixture
def named(settings):
    """A registered Prometheus for the pages that never query it (no server started)."""
    settings.SPECREVIEW_PROMETHEUS = {"test": {"url": "http://127.0.0.1:9", "bearer_token_file": ""}}
    return "test"


def _start(decision, actor) -> Rollout:
    return services.rollout_start(
        decision=decision,
        actor=actor,
        prometheus="test",
        candidate_pool='pool="candidate"',
        control_pool='pool="baseline"',
        stages=[{"share": 10, "minutes": 30}, {"share": 50, "minutes": 30}],
    )


def _page(client, rollout: Rollout) -> str:
    response = client.get(f"/decisions/{rollout.decision_id}/rollouts/{rollout.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def test_it_shows_each_triggers_value_and_state_on_the_rollout_and_decision_pages(
    signed, engineer, engineer_client, metrics, registered
):
    rollout = _start(signed, engineer)
    short = [t | {"window_min": WINDOW_MIN, "min_samples": 3} for t in rollout.triggers]
    Rollout.objects.filter(pk=rollout.pk).update(triggers=[*short, UNMEASURED])  # the last has no query
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Look.objects.filter(rollout=rollout, trigger=0).count() < 2:
        time.sleep(WINDOW_MIN * 60 / 2)
        rollout_evaluate(rollout_id=rollout.pk)
    rollout.refresh_from_db()
    html = _page(engineer_client, rollout)

    for index, trigger in enumerate(short):
        last = Look.objects.filter(rollout=rollout, trigger=index).last()
        assert last is not None and last.observation is not None, (trigger["metric"], last and last.message)
        unit = trigger["unit"]
        assert escape(trigger_condition(trigger)) in html  # the threshold
        assert f'<td class="num nowrap">{escape(value(last.candidate, unit))}</td>' in html, trigger["metric"]
        assert f"<b>{escape(observed(last.observation, trigger))}</b>" in html, trigger["metric"]
        if trigger["compare"] == "control":
            assert f'<td class="num nowrap">{escape(value(last.control, unit))}</td>' in html, trigger[
                "metric"
            ]
        assert f'<span class="badge {state_badge(last.state)}">{last.state}</span>' in html, trigger["metric"]
    assert html.count('<svg class="spark"') == len(short)  # a sparkline per measured trigger
    assert "not measured: this trigger has no query" in html
    assert html.count("not measured") == 1

    card = engineer_client.get(f"/decisions/{signed.pk}/").content.decode()
    link = f'href="/decisions/{signed.pk}/rollouts/{rollout.pk}/"'
    assert link in card
    row = card[card.index(link) :].split("</tr>")[0]
    assert f'<span class="badge pass">{rollout.get_state_display()}</span>' in row
    assert "Start a guarded rollout" not in card  # one active rollout at a time


def test_it_shows_a_breach_on_the_rollout_and_decision_pages(signed, engineer, engineer_client, named):
    rollout = _start(signed, engineer)
    reason = "rollback recommended: p95 TPOT (interactive) is beyond its threshold"
    Rollout.objects.filter(pk=rollout.pk).update(state=Rollout.State.BREACHED, reason=reason)
    html = _page(engineer_client, rollout)
    assert '<span class="badge fail">paused: rollback recommended</span>' in html
    assert f'<p class="notice">{escape(reason)}</p>' in html
    card = engineer_client.get(f"/decisions/{signed.pk}/").content.decode()
    assert '<span class="badge fail">paused: rollback recommended</span>' in card


def test_it_shows_the_signed_acceptance_rate_beside_production(signed, engineer, engineer_client, named):
    html = _page(engineer_client, _start(signed, engineer))
    table = html[html.index('id="prediction"') : html.index("</section>", html.index('id="prediction"'))]
    row = next(r for r in table.split("<tr>") if r.startswith("<td>acceptance rate"))
    # no looks yet; what was signed: the candidate's rate and its 95% interval per load
    assert "no looks yet" in row and "1x: 60% [56%, 64%]<br>4x: 55% [49.9%, 60%]" in row


def test_it_offers_the_registered_prometheus_servers(signed, engineer_client, named):
    response = engineer_client.get(f"/decisions/{signed.pk}/rollouts/new/")
    assert response.status_code == 200
    assert '<option value="test"' in response.content.decode()
    card = engineer_client.get(f"/decisions/{signed.pk}/").content.decode()
    assert f'href="/decisions/{signed.pk}/rollouts/new/"' in card


def test_it_starts_a_rollout_and_redirects_to_its_page(signed, engineer, engineer_client, named):
    response = engineer_client.post(f"/decisions/{signed.pk}/rollouts/new/", VALID)
    rollout = Rollout.objects.get(decision=signed)
    assert response.status_code == 302
    assert response["Location"] == f"/decisions/{signed.pk}/rollouts/{rollout.pk}/"
    assert rollout.started_by == engineer and rollout.candidate_pool == 'pool="candidate"'
    assert rollout.stages == [
        {"share": 5, "minutes": 30},
        {"share": 25, "minutes": 60},
        {"share": 100, "minutes": 120},
    ]


@pytest.mark.parametrize(
    ("field", "given", "message"),
    [
        ("candidate_pool", 'pool="a"} or vector(1) or {x="', "candidate_pool: the pool selector has"),
        ("control_pool", 'pool="candidate"', "control_pool: the same selector as the candidate"),
        ("stages", "0:10", "stages, stage 1: share must be above 0"),
        ("stages", "abc", "stages, stage 1: write share:minutes"),
        ("stages", "50:10, 10:10", "stages, stage 2: the share never falls (10 after 50)"),
    ],
)
def test_it_refuses_a_bad_field_naming_it(signed, engineer_client, named, field, given, message):
    response = engineer_client.post(f"/decisions/{signed.pk}/rollouts/new/", VALID | {field: given})
    assert response.status_code == 400
    html = response.content.decode()
    assert escape(message) in html
    assert '{x="' not in html  # the hostile selector is echoed escaped
    assert not Rollout.objects.exists()


def test_it_refuses_to_start_a_draft_or_a_keep_off_decision(
    experiment, engineer, approver, engineer_client, named
):
    draft = draft_make(experiment=experiment, author=engineer)
    keep_off = signed_make(
        experiment=experiment,
        author=engineer,
        signer=approver,
        proposal="keep_off",
        title="Keep it off",
        override_reason="the candidate's gain is inside the noise",
    )
    for decision, message in (
        (draft, "only an approved decision rolls out"),
        (keep_off, "the decision keeps speculation off: there is nothing to roll out"),
    ):
        card = engineer_client.get(f"/decisions/{decision.pk}/").content.decode()
        assert "Start a guarded rollout" not in card
        response = engineer_client.post(f"/decisions/{decision.pk}/rollouts/new/", VALID)
        assert response.status_code == 400
        assert message in response.content.decode()
    assert not Rollout.objects.exists()


def test_it_forbids_a_viewer_to_start_or_act(signed, engineer, viewer_client, named):
    rollout = _start(signed, engineer)
    assert viewer_client.get(f"/decisions/{signed.pk}/rollouts/new/").status_code == 403
    assert viewer_client.post(f"/decisions/{signed.pk}/rollouts/new/", VALID).status_code == 403
    act = f"/decisions/{signed.pk}/rollouts/{rollout.pk}/act/"
    assert viewer_client.post(act, {"act": "stop", "reason": "no"}).status_code == 403
    html = _page(viewer_client, rollout)
    assert 'id="act"' not in html  # a viewer is not offered the form
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.RUNNING and Rollout.objects.count() == 1


def _act(client, rollout: Rollout, act: str, reason: str = "") -> str:
    url = f"/decisions/{rollout.decision_id}/rollouts/{rollout.pk}/act/"
    response = client.post(url, {"act": act, "reason": reason}, follow=True)
    assert response.redirect_chain == [(f"/decisions/{rollout.decision_id}/rollouts/{rollout.pk}/", 302)]
    rollout.refresh_from_db()
    return response.content.decode()


def test_it_pauses_resumes_and_stops_with_a_reason(signed, engineer, engineer_client, named):
    rollout = _start(signed, engineer)
    assert 'value="pause"' in _page(engineer_client, rollout)
    _act(engineer_client, rollout, "pause")
    assert rollout.state == Rollout.State.PAUSED
    assert 'value="resume"' in _page(engineer_client, rollout)
    _act(engineer_client, rollout, "resume")
    assert rollout.state == Rollout.State.RUNNING

    html = _act(engineer_client, rollout, "stop")
    assert "reason: say why" in html
    assert rollout.state == Rollout.State.RUNNING
    html = _act(engineer_client, rollout, "stop", "the canary pods were misconfigured")
    assert rollout.state == Rollout.State.STOPPED and rollout.archive_sha256
    assert "the canary pods were misconfigured" in html
    assert 'id="act"' not in html  # an ended rollout has nothing to act on
    assert "Start a guarded rollout" in engineer_client.get(f"/decisions/{signed.pk}/").content.decode()


def test_it_records_a_rollback_with_its_reason(signed, engineer, engineer_client, named):
    rollout = _start(signed, engineer)
    assert "reason: say why" in _act(engineer_client, rollout, "rolled_back", "  ")
    assert rollout.state == Rollout.State.RUNNING
    html = _act(engineer_client, rollout, "rolled_back", "p95 TPOT up 15 ms on the canary")
    assert rollout.state == Rollout.State.ROLLED_BACK and rollout.ended_at is not None
    assert '<span class="badge fail">rolled back</span>' in html
    assert "Choose pause, resume" in _act(engineer_client, rollout, "explode")


def _strings(node) -> list[str]:
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return [node] if isinstance(node, str) else []


@pytest.mark.parametrize(
    ("tool", "kinds"), [("argo", {"AnalysisTemplate"}), ("flagger", {"MetricTemplate", None})]
)
def test_it_exports_the_triggers_as_yaml(signed, viewer_client, tool, kinds):
    response = viewer_client.get(f"/decisions/{signed.pk}/rollouts/export/{tool}.yaml?namespace=serving")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/yaml")
    assert response["Content-Disposition"] == f'attachment; filename="decision-{signed.pk}-{tool}.yaml"'
    docs = list(yaml.safe_load_all(response.content.decode()))
    assert {d.get("kind") for d in docs} == kinds
    text = "\n".join(_strings(docs))
    queries = [t["query"] for t in signed.rollback_triggers if t.get("query")]
    assert queries
    for query in queries:  # the query up to its first placeholder, as written
        assert query.split("$")[0] in text, query


def test_it_refuses_a_bad_namespace_and_an_unknown_tool(signed, viewer_client):
    response = viewer_client.get(
        f"/decisions/{signed.pk}/rollouts/export/flagger.yaml?namespace=Not_A/Namespace"
    )
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")
    assert response.content.decode().startswith(
        "# refused: namespace 'Not_A/Namespace' is not a Kubernetes namespace"
    )
    assert viewer_client.get(f"/decisions/{signed.pk}/rollouts/export/spinnaker.yaml").status_code == 404
