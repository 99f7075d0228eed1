"""Raw text is a permission (issue 24): unique markers are planted in the prompts, chat messages,
tool outputs, references and retrieved payloads (request metadata) and model outputs of a
finished synthetic experiment; then every page and API operation of the authorization matrix,
and every export, is fetched. A viewer meets none of the markers, raw or HTML-escaped, in any
response (HTML, JSON, CSV, Markdown, the PDF's text, the bundle); an engineer meets them where the
console shows text, and each such display is one access event."""

from __future__ import annotations

import base64
import html
import json
import re
import zlib

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.accounts.access import RAW_TEXT_HIDDEN, raw_text_allowed, raw_text_shown
from console.accounts.middleware import API_PAGES
from console.accounts.models import RawTextAccess
from tests.test_authorization_matrix import MATRIX, concrete

pytestmark = pytest.mark.django_db

MARKERS = {
    "prompt": "qz7PROMPTmark",
    "message": "qz7MESSAGEmark",
    "tool_output": "qz7TOOLOUTmark",
    "reference": "qz7REFERENCEmark",
    "retrieved": "qz7RETRIEVEDmark",
    "output": "qz7OUTPUTmark",
}
GET_PATHS = sorted(key.split(" ", 1)[1] for key in MATRIX if key.startswith("GET ") and key != "GET /admin/*")
EXPORTS = ("/decisions/{pk}/export.md", "/decisions/{pk}/export.pdf", "/decisions/{pk}/bundle.json")


def _plant(experiment) -> None:
    """Markers in every raw-text field of the trace's requests and of every result."""
    from console.results.models import RequestResult
    from console.traces.models import TraceRequest

    m = MARKERS
    for tr in TraceRequest.objects.filter(trace=experiment.trace):
        if tr.position % 2:
            tr.prompt, tr.messages = (
                None,
                [
                    {"role": "user", "content": f"{m['message']} {tr.position}"},
                    {"role": "tool", "content": f"{m['tool_output']} {tr.position}"},
                ],
            )
        else:
            tr.prompt = f"{m['prompt']} {tr.position}"
        tr.metadata = {"reference_answer": m["reference"], "retrieved": [m["retrieved"]]}
        tr.save(update_fields=["prompt", "messages", "metadata"])
    for r in RequestResult.objects.filter(run__experiment=experiment).select_related("run"):
        # the run id right after the marker: baseline and candidate outputs diverge there
        r.output_text = f"{m['output']} run {r.run_id} " + "x" * r.num_output_tokens
        r.save(update_fields=["output_text"])


@pytest.fixture
def world(engineer, approver, second_approver, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    from console.analysis.selectors import comparison_summary_for_experiment
    from console.analysis.services import comparison_refresh
    from console.decisions import services
    from console.policies.services import policy_fit
    from console.results.models import RequestResult
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=40, ks=(2,), loads="1x", repeats=2, name="raw-text")
    _plant(experiment)
    comparison_refresh(experiment_id=experiment.pk, n_boot=50)
    summary = comparison_summary_for_experiment(experiment=experiment)
    assert summary.quality.first_divergences, "the planted outputs must diverge"
    policy = policy_fit(experiment=experiment, created_by=engineer)
    candidate = experiment.arms.exclude(label="baseline").order_by("pk").first()

    def draft(title):
        return services.decision_create(
            experiment=experiment, author=engineer, title=title, proposal="enable",
            candidate_arm=candidate, traffic_class="interactive", comparison=summary,
        )  # fmt: skip

    draft_only = draft("Turn on n-gram")
    signed = services.decision_update(
        decision=draft("Turn on n-gram, signed"),
        actor=engineer,
        changes={
            "rationale": "latency first",
            "checklist_answers": {
                key: {"answer": "yes"}
                for key in ("production_traces", "current_serving_path", "framework_compatibility")
            },
            "rollback_owner": "serving on-call",
            "rollback_verification": "p95 back within 15 min",
        },
    )
    signed = services.decision_submit(decision=signed, actor=engineer)
    signed = services.decision_sign(
        decision=signed, signer=second_approver, verdict="approved", comment="ok", override_reason="risk"
    )
    runs = experiment.runs.filter(status="done").order_by("order")
    baseline, candidate_run = (
        runs.filter(arm__label="baseline").first(),
        runs.exclude(arm__label="baseline").first(),
    )
    a = RequestResult.objects.filter(run=baseline).order_by("pk").first()
    b = RequestResult.objects.get(run=candidate_run, request_id=a.request_id)
    # a rollout of the signed decision, so the matrix's rollout routes have objects to show
    from console.rollouts.services import rollout_start
    from tests.support.world import WORLD_PROMETHEUS

    settings.SPECREVIEW_PROMETHEUS = WORLD_PROMETHEUS
    rollout = rollout_start(
        decision=signed, actor=engineer, prometheus=next(iter(WORLD_PROMETHEUS)), candidate_pool='pool="spec"',
        control_pool='pool="baseline"', stages=[{"share": 10, "minutes": 30}],
    )  # fmt: skip
    ids = {
        "signed": signed.pk,
        "signed_idle": signed.pk,
        "rollout": rollout.pk,
        "paused_rollout": rollout.pk,
        "trace": experiment.trace_id,
        "experiment": experiment.pk,
        "policy": policy.pk,
        "token": 0,
        "draft": draft_only.pk,
        "submitted": signed.pk,
        "run": baseline.pk,
        "failed_run": baseline.pk,
        "result_a": a.pk,
        "result_b": b.pk,
    }
    return ids, (draft_only, signed)


def _fetch_all(user, ids, decisions, api_token_for) -> dict[str, str]:
    """Every GET page and API operation of the matrix, and every export, as text by URL."""
    client = Client()
    client.force_login(user)
    headers = api_token_for(user)
    bodies = {}
    for path in GET_PATHS:
        if "{pk}" in path and path.startswith("/accounts/"):
            continue  # one's own tokens: no raw text
        url = concrete(path, ids)
        api = url.startswith("/api/") and url not in API_PAGES
        response = client.get(url, **(headers if api else {}))
        assert response.status_code < 500, (url, response.status_code)
        bodies[url] = _text(response)
    for decision in decisions:
        for export in EXPORTS:
            url = export.format(pk=decision.pk)
            response = client.get(url)
            assert response.status_code == 200, url
            bodies[url] = _text(response)
    return bodies


def _text(response) -> str:
    content = b"".join(response.streaming_content) if response.streaming else response.content
    if content.startswith(b"%PDF"):
        return _pdf_text(content)
    return content.decode("utf-8", errors="replace")


def _pdf_text(content: bytes) -> str:
    """The PDF's bytes with every stream decoded (reportlab writes text in ASCII85 + Flate
    streams, or plain Flate ones)."""
    parts = [content.decode("latin-1")]
    for stream in re.findall(rb"stream\r?\n(.*?)endstream", content, flags=re.S):
        data = stream.strip()
        try:
            if data.endswith(b"~>"):
                data = base64.a85decode(data[:-2])
            parts.append(zlib.decompress(data).decode("latin-1"))
        except (ValueError, zlib.error):
            continue
    return "\n".join(parts)


def _forms(marker: str) -> set[str]:
    """The marker as typed, HTML-escaped, and JSON-escaped."""
    return {marker, html.escape(marker), json.dumps(marker)[1:-1]}


def _found(bodies: dict[str, str], marker: str) -> list[str]:
    return [url for url, body in bodies.items() if any(f in body for f in _forms(marker))]


def test_a_viewer_meets_no_raw_text_on_any_page_api_operation_or_export(world, viewer, api_token_for):
    ids, decisions = world
    bodies = _fetch_all(viewer, ids, decisions, api_token_for)
    leaks = {name: _found(bodies, marker) for name, marker in MARKERS.items()}
    assert {name: urls for name, urls in leaks.items() if urls} == {}
    assert any(RAW_TEXT_HIDDEN in body or html.escape(RAW_TEXT_HIDDEN) in body for body in bodies.values())
    assert not RawTextAccess.objects.exists()


# Where an engineer reads each kind of text, and the access event each display writes.
SHOWN = {
    "/traces/{trace}/": ("prompt", "message", "tool_output", "reference", "retrieved"),
    "/api/traces/{trace}/requests": ("prompt", "message", "tool_output", "reference", "retrieved"),
    "/analysis/runs/{run}/": ("output",),
    "/analysis/results/{result_a}/vs/{result_b}/": ("output",),
    "/analysis/experiments/{experiment}/": ("output",),
    "/analysis/experiments/{experiment}/results.csv": ("output",),
    "/analysis/experiments/{experiment}/comparison.json": ("output",),
    "/api/experiments/{experiment}/comparison": ("output",),
}
EVENTS = {
    "trace page",
    "trace requests API",
    "run page",
    "outputs side by side",
    "comparison page",
    "results CSV",
    "comparison JSON",
    "comparison API",
}


def test_an_engineer_reads_the_text_and_each_display_is_an_access_event(world, engineer, api_token_for):
    ids, decisions = world
    bodies = _fetch_all(engineer, ids, decisions, api_token_for)
    missing = []
    for pattern, names in SHOWN.items():
        url = pattern.format(**ids)
        missing += [f"{url}: {n}" for n in names if not any(f in bodies[url] for f in _forms(MARKERS[n]))]
    assert missing == []
    # the PDF's text is searched at all: its title is readable there
    assert "Turn on n-gram, signed" in bodies[f"/decisions/{decisions[1].pk}/export.pdf"]
    # the compare page shows the request's prompt too
    assert MARKERS["prompt"] in bodies[f"/analysis/results/{ids['result_a']}/vs/{ids['result_b']}/"]
    events = list(RawTextAccess.objects.filter(user=engineer))
    assert {e.view for e in events} == EVENTS
    assert len(events) == len(EVENTS)  # one per display, never one per request row
    assert {e.username for e in events} == {engineer.username}


def test_it_gives_the_permission_to_engineers_and_approvers_only(engineer, approver, viewer):
    from console.accounts.teams import team_default

    team = team_default().pk
    assert raw_text_allowed(user=engineer, team_id=team) and raw_text_allowed(user=approver, team_id=team)
    assert not raw_text_allowed(user=viewer, team_id=team)


def test_access_events_are_append_only(engineer):
    from django.db import connection, transaction
    from django.db.utils import DatabaseError

    from console.accounts.services import raw_text_access_record

    event = raw_text_access_record(user=engineer, view="run page", object_ref="run 1")
    with pytest.raises(ValueError):
        event.save()
    with pytest.raises(ValueError):
        event.delete()
    with pytest.raises(DatabaseError), transaction.atomic():
        RawTextAccess.objects.filter(pk=event.pk).update(view="nothing")
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM accounts_rawtextaccess")
    assert RawTextAccess.objects.get(pk=event.pk).view == "run page"


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    text=st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=40
    )
)
def test_a_viewer_sees_no_arbitrary_prompt_or_output_on_the_pages_that_show_text(text, run_pages):
    """Arbitrary text, HTML-escapable characters included, searched raw and escaped."""
    viewer_client, set_text, urls = run_pages
    set_text(text)
    for url in urls:
        body = viewer_client.get(url).content.decode()
        assert RAW_TEXT_HIDDEN in html.unescape(body), url
        marked = f"MARK[{text}]END"
        assert not [form for form in _forms(marked) if form in body], url


@pytest.fixture
def run_pages(viewer):
    from console.results.models import RequestResult
    from console.traces.models import TraceRequest
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=2, ks=(2,), loads="1x", repeats=1, name="arbitrary")
    results = RequestResult.objects.filter(run__experiment=experiment).order_by("pk")
    a, b = results[0], results.exclude(run=results[0].run).get(request_id=results[0].request_id)

    def set_text(text: str) -> None:
        marked = f"MARK[{text}]END"
        TraceRequest.objects.filter(trace=experiment.trace).update(prompt=marked, metadata={"ref": marked})
        RequestResult.objects.filter(run__experiment=experiment).update(output_text=marked)

    client = Client()
    client.force_login(viewer)
    urls = [
        f"/traces/{experiment.trace_id}/",
        f"/analysis/runs/{a.run_id}/",
        f"/analysis/results/{a.pk}/vs/{b.pk}/",
    ]
    return client, set_text, urls


@pytest.mark.parametrize("value", [None, "", [], {}])
def test_an_absent_text_stays_absent_rather_than_hidden(value):
    assert raw_text_shown(value, allowed=False) == value


def test_the_upload_preview_hides_the_file_s_text_from_an_uploader_without_the_permission(client, engineer):
    """An engineer whose membership turns raw text off may upload but gets the placeholder in the
    preview too, and only a reader's preview is an access event."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from console.accounts.services import membership_set, user_create
    from console.accounts.teams import team_default

    def upload():
        row = {
            "id": "r1",
            "arrival_s": 0,
            "prompt": MARKERS["prompt"],
            "max_tokens": 8,
            "metadata": {"ref": MARKERS["reference"]},
        }
        return SimpleUploadedFile("t.jsonl", (json.dumps(row) + "\n").encode())

    form = {"holdout_fraction": "0.3", "seed": "0", "default_max_tokens": "64", "preview": "1"}
    uploader = user_create(username="uma-uploader", password="pw-uma-uploader-1", role="engineer")
    membership_set(user=uploader, team=team_default(), role="engineer", raw_text=False)
    client.force_login(uploader)
    page = client.post("/traces/upload/", {"file": upload(), **form}).content.decode()
    assert html.escape(RAW_TEXT_HIDDEN) in page
    assert not [n for n, m in MARKERS.items() if m in page]
    assert not RawTextAccess.objects.exists()
    client.force_login(engineer)
    page = client.post("/traces/upload/", {"file": upload(), **form}).content.decode()
    assert MARKERS["prompt"] in page and MARKERS["reference"] in page
    assert list(RawTextAccess.objects.values_list("view", flat=True)) == ["upload preview"]
