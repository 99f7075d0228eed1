"""Where the API, the forms, the schema and the pages disagreed (issue 24, findings 3 and 5):
free-form JSON nested 256 deep (a 500), a sign-off comment capped at 20,000 characters by the API
and 200,000 by the form, nullable fields refusing null, any traffic class through the API, an
oversized body answered with HTML, CSV cells with a formula after a separator, a renamed signer
rewriting history, and the new-token page cacheable."""

from __future__ import annotations

import json
import re

import pytest
from django import forms

from console.api import openapi_document
from console.decisions.forms import DecisionEditForm
from console.decisions.limits import TEXT_MAX_CHARS
from console.decisions.models import Decision
from console.experiments.forms import JSONField
from console.exports import csv_cell
from console.jsonutil import JSON_MAX_DEPTH
from tests.decisions.conftest import draft_make, signed_make, submitted_make
from tests.decisions.factories import experiment_make, summary_make, summary_passing

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def comparison(monkeypatch):
    from console.decisions import selectors

    monkeypatch.setattr(
        selectors, "decision_comparison", lambda *, experiment: summary_make(summary_passing())
    )


@pytest.fixture
def draft(engineer):
    return draft_make(experiment=experiment_make(created_by=engineer), author=engineer)


def _nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def _patch(client, decision, body, headers):
    return client.patch(
        f"/api/decisions/{decision.pk}", data=json.dumps(body), content_type="application/json", **headers
    )


# --- finding 3: free-form JSON nested too deep -------------------------------------------------


@pytest.mark.parametrize("field", ["policy", "gate_settings", "rollback_revert_config"])
def test_it_answers_json_nested_300_deep_with_a_400_naming_the_field(
    client, draft, engineer, api_token_for, field
):
    """Finding 3: past about 256 levels a free-form field was a 500 (pydantic's serialization depth)."""
    before = Decision.objects.get(pk=draft.pk)
    response = _patch(client, draft, {field: _nested(300)}, api_token_for(engineer))
    assert response.status_code == 400, response.content
    body = response.json()
    assert field in body["error"] and f"nested deeper than {JSON_MAX_DEPTH} levels" in body["error"]
    assert list(body["details"]) == [field]
    after = Decision.objects.get(pk=draft.pk)
    assert (after.policy, after.gate_settings, after.rollback_revert_config) == (
        before.policy,
        before.gate_settings,
        before.rollback_revert_config,
    )


def test_it_accepts_json_as_deep_as_the_limit(client, draft, engineer, api_token_for):
    """Finding 3: the limit is the limit, not one below it."""
    response = _patch(client, draft, {"policy": _nested(JSON_MAX_DEPTH)}, api_token_for(engineer))
    assert response.status_code == 200, response.content


def test_it_answers_engine_args_nested_300_deep_with_a_400(client, engineer, api_token_for):
    """Finding 3: the experiments API reads its body through the same check."""
    body = {
        "trace": 1,
        "name": "deep",
        "engine": "hf",
        "target_model": "m",
        "baseline_engine_args": _nested(300),
    }
    response = client.post(
        "/api/experiments", data=json.dumps(body), content_type="application/json", **api_token_for(engineer)
    )
    assert response.status_code == 400 and "baseline_engine_args" in response.json()["details"]


def test_it_answers_a_body_nested_past_the_parser_with_a_400(client, draft, engineer, api_token_for):
    """Finding 3: 100,000 levels stop Python's parser itself (RecursionError): still a 400."""
    data = '{"policy": ' + "[" * 100_000 + "]" * 100_000 + "}"
    response = client.patch(
        f"/api/decisions/{draft.pk}", data=data, content_type="application/json", **api_token_for(engineer)
    )
    assert response.status_code == 400 and "nested deeper" in response.json()["error"]


def test_it_shows_json_nested_too_deep_as_a_form_error(draft):
    """Finding 3: the forms parse free-form JSON with the same check (decision policy, experiment JSON)."""
    data = {**DecisionEditForm.initial_for(draft), "policy": json.dumps(_nested(300))}
    data = {k: ("" if v is None else v) for k, v in data.items()}
    form = DecisionEditForm(data=data, decision=draft)
    assert not form.is_valid() and "nested deeper than 64 levels" in " ".join(form.errors["policy"])
    with pytest.raises(forms.ValidationError, match="nested deeper than 64 levels"):
        JSONField().clean(json.dumps(_nested(300)))


# --- finding 5: one contract for the API, the forms and the schema ---------------------------------


def test_it_takes_a_sign_off_comment_as_long_as_the_form_and_service_do(
    client, engineer, approver, api_token_for
):
    """Finding 5: the API capped the comment at 20,000 characters, the form at 200,000."""
    submitted = submitted_make(experiment=experiment_make(created_by=engineer), author=engineer)
    auth = api_token_for(approver)
    url = f"/api/decisions/{submitted.pk}/signoff"
    too_long = {"verdict": "approved", "comment": "x" * (TEXT_MAX_CHARS + 1)}
    response = client.post(url, data=json.dumps(too_long), content_type="application/json", **auth)
    assert response.status_code == 400 and "comment" in response.json()["error"]
    long = {"verdict": "approved", "comment": "x" * 30_000}
    response = client.post(url, data=json.dumps(long), content_type="application/json", **auth)
    assert response.status_code == 200, response.content[:300]
    assert len(Decision.objects.get(pk=submitted.pk).signoff.comment) == 30_000


def _patch_schema() -> dict:
    doc = openapi_document()
    ref = doc["paths"]["/api/decisions/{id}"]["patch"]["requestBody"]["content"]["application/json"]["schema"]
    return doc["components"]["schemas"][ref["$ref"].rsplit("/", 1)[1]]


def _nullable(prop: dict) -> bool:
    return prop.get("type") == "null" or any(_nullable(p) for p in prop.get("anyOf", []))


# What null clears each field the document declares nullable to (the field's "nothing").
CLEARED = {
    "rationale": "",
    "policy": None,
    "policy_ref": "",
    "gate_settings": {},
    "checklist_answers": {},
    "rollback_triggers": [],
    "rollback_revert_config": {},
    "rollback_steps": "",
    "rollback_owner": "",
    "rollback_verification": "",
    "approvals_required": None,  # the deployment's number (SPECREVIEW_APPROVALS_REQUIRED)
}


def test_it_does_with_null_what_the_schema_says_for_every_patch_field(client, engineer, api_token_for):
    """Finding 5: `PATCH {"rollback_triggers": null}` was refused though the schema said nullable."""
    props = _patch_schema()["properties"]
    assert {name for name, prop in props.items() if _nullable(prop)} == set(CLEARED)
    auth = api_token_for(engineer)
    experiment = experiment_make(created_by=engineer)
    for name in props:
        draft = draft_make(
            experiment=experiment, author=engineer, policy={"rules": []}, policy_ref="/policies/1/"
        )
        response = _patch(client, draft, {name: None}, auth)
        if name in CLEARED:
            assert response.status_code == 200, (name, response.content)
            assert getattr(Decision.objects.get(pk=draft.pk), name) == CLEARED[name], name
        else:
            assert response.status_code == 400, (name, response.content)
            assert name in response.json()["details"], name


def test_it_refuses_a_traffic_class_the_form_does_not_offer(client, draft, engineer, api_token_for):
    """Finding 5: the API stored any traffic_class string; the form offers interactive and batch."""
    auth = api_token_for(engineer)
    response = _patch(client, draft, {"traffic_class": "zzz"}, auth)
    assert response.status_code == 400 and "traffic_class" in response.json()["details"]
    assert Decision.objects.get(pk=draft.pk).traffic_class == "interactive"
    assert _patch(client, draft, {"traffic_class": "batch"}, auth).status_code == 200
    schema = _patch_schema()["properties"]["traffic_class"]
    assert sorted(json.dumps(schema).count(c) for c in ("interactive", "batch")) == [1, 1]


def test_it_refuses_an_unknown_traffic_class_in_the_service_too(draft, engineer):
    """Finding 5: one validation, whichever door the value comes through."""
    from console.decisions.services import DecisionError, decision_update

    with pytest.raises(DecisionError, match="traffic_class"):
        decision_update(decision=draft, actor=engineer, changes={"traffic_class": "zzz"})


def test_it_answers_a_body_over_the_size_limit_in_the_api_error_shape(
    client, draft, engineer, api_token_for, settings
):
    """Finding 5: a JSON body over 10 MB got Django's HTML 400 page."""
    data = json.dumps({"rationale": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)})
    response = client.patch(
        f"/api/decisions/{draft.pk}", data=data, content_type="application/json", **api_token_for(engineer)
    )
    assert response.status_code == 413 and response["Content-Type"].startswith("application/json")
    assert "larger than 10 MiB" in response.json()["error"]


@pytest.mark.parametrize(
    "value",
    [
        "x;=cmd|' /C calc'!A0",
        "x,=1+1",
        "note\t@SUM(A1:A9)",
        'a\n+HYPERLINK("http://x")',
        "a; -2+3",
        'a;"=cmd|x"',
    ],
)
def test_it_neutralises_a_formula_after_a_separator_in_a_csv_cell(value):
    """Finding 5: only the first character was checked; a spreadsheet that splits on ; , or tab runs
    what follows the separator as a cell of its own."""
    cell = csv_cell(value)
    parts = [part for separator in (",", ";", "\t", "\n") for part in cell.split(separator)]
    assert not [part for part in parts if _runs_as_formula(part)], cell
    # what a spreadsheet reads back is the text, with the marks it shows as text
    assert cell.replace("'", "") == value.replace("'", "")


def _runs_as_formula(part: str) -> bool:
    """Whether a spreadsheet would evaluate ``part`` as a cell of its own."""
    text = part.lstrip(' "')
    return text[:1] in ("=", "+", "-", "@") and not re.fullmatch(r"[+-]?\d+(\.\d+)?", text.strip())


@pytest.mark.parametrize("value", ["a=b", "1;-2;3", "x, -0.5", "plain; text", "e-mail: a@b"])
def test_it_leaves_numbers_and_plain_text_after_a_separator_alone(value):
    """Finding 5: a negative number after a separator is data, not a formula."""
    assert csv_cell(value) == value


def test_it_shows_the_signer_name_recorded_at_signing(
    client, engineer, approver, viewer_client, api_token_for
):
    """Finding 5: renaming the signer rewrote the name on every page and in the API."""
    signed = signed_make(experiment=experiment_make(created_by=engineer), author=engineer, signer=approver)
    approver.username = "someone-else"
    approver.save()
    detail = viewer_client.get(f"/decisions/{signed.pk}/").content.decode()
    assert detail.count("by <b>alex-approver</b>") == 2 and "by <b>someone-else</b>" not in detail
    archive = viewer_client.get("/decisions/archive/").content.decode()
    listing = viewer_client.get("/decisions/").content.decode()
    for page in (archive, listing):
        assert "alex-approver" in page and "someone-else" not in page
    item = client.get(f"/api/decisions/{signed.pk}", **api_token_for(engineer)).json()
    assert item["signoff"]["signer"] == "alex-approver"


def test_it_tells_caches_not_to_keep_the_page_that_shows_a_new_key(viewer_client):
    """Finding 5: the page that shows a new API key once sent no Cache-Control: no-store."""
    response = viewer_client.post("/accounts/tokens/", {"name": "ci", "scopes": ["read"]})
    assert response.status_code == 200 and response.context["new_key"]
    assert "no-store" in response["Cache-Control"]
