"""The holdout warning (issue 23): when speculation everywhere (or nowhere) beats the fitted
policy on the holdout with an interval excluding zero, the page, the API and the command say so,
and the offer stores that rule as a new policy; when nothing beats it, nobody warns."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from django.core.management import call_command
from scipy import stats as sps

from console.policies.alternatives import ALL_OFF, holdout_alternatives, holdout_warning
from console.policies.fitting import INTERVAL_CROSSES_ZERO, FitParams, policy_fit, policy_score
from console.policies.models import SlicePolicy
from console.policies.services import policy_fit as policy_fit_stored
from tests.policies.builders import ARM_CONFIGS, features_frame, slice_requests, units_frame
from tests.support.synthetic import TASKS, experiment_synthesize
from tests.test_page_numbers import findings, visible_text

FEATURES = ["task", "traffic_class", "model"]


def _issue_23():
    """Few, noisy train requests (every slice's interval crosses zero), a clear holdout gain."""
    rng = np.random.default_rng(3)
    train_f, train_u = slice_requests("t", list(0.001 + rng.normal(0, 0.006, 12)), split="train")
    hold_f, hold_u = slice_requests("h", list(0.003 + rng.normal(0, 0.001, 30)), split="holdout")
    return features_frame(train_f + hold_f), units_frame(train_u + hold_u)


def _fit(features, units):
    fitted = policy_fit(units, features, feature_names=FEATURES, arm_configs=ARM_CONFIGS)
    return fitted, holdout_alternatives(fitted["rules"], units, features, params=FitParams(), n_boot=2000)


def test_it_warns_when_speculation_everywhere_beats_a_policy_that_turned_nothing_on():
    features, units = _issue_23()
    fitted, alternatives = _fit(features, units)
    assert fitted["rules"] == [{"when": {}, "arm": None, "speculative_config": None}]
    assert {c["why_not"] for c in fitted["candidates"]} == {INTERVAL_CROSSES_ZERO}
    everywhere = next(a for a in alternatives if a["key"] == "all_on:k2")
    holdout = units.loc[units["request_id"].str.startswith("h"), "benefit"].to_numpy()
    assert everywhere["n"] == 30 and everywhere["policy"] == 0.0
    assert everywhere["delta"] == pytest.approx(holdout.mean())
    # the request-clustered bootstrap interval of a mean, next to the textbook t interval
    half = sps.t.ppf(0.975, 29) * holdout.std(ddof=1) / np.sqrt(30)
    assert everywhere["lo"] == pytest.approx(holdout.mean() - half, rel=0.1) and everywhere["lo"] > 0
    assert everywhere["beats"] is True
    nowhere = next(a for a in alternatives if a["key"] == ALL_OFF)
    assert nowhere["delta"] == 0.0 and nowhere["beats"] is False
    assert holdout_warning(alternatives)["key"] == "all_on:k2"
    # the holdout's own score said the same thing, unread by the page until now
    scored = policy_score(fitted["rules"], units, features, split="holdout")
    assert scored["policy_vs_all_on"]["k2"]["hi"] < 0


def test_it_does_not_warn_when_nothing_beats_the_fitted_policy():
    f, u = slice_requests("t", [0.004 + 0.001 * (i % 3) for i in range(30)], split="train")
    hf, hu = slice_requests("h", [0.004 + 0.001 * (i % 3) for i in range(30)], split="holdout")
    features, units = features_frame(f + hf), units_frame(u + hu)
    fitted, alternatives = _fit(features, units)
    assert fitted["rules"][0]["arm"] == "k2"
    assert [a["beats"] for a in alternatives] == [False, False]
    assert holdout_warning(alternatives) is None and holdout_warning(None) is None


@pytest.fixture
def experiment(db):
    return experiment_synthesize(
        n_requests=60, ks=(2, 4), loads="1x", repeats=2, seed=2, name="holdout warning"
    )


@pytest.fixture
def starved(experiment, engineer):
    """A policy that could enable nothing (50 train requests per slice asked, 40 in all), where
    every candidate is faster on the holdout."""
    return policy_fit_stored(experiment=experiment, min_support=50, created_by=engineer)


@pytest.mark.django_db
def test_the_page_the_api_and_the_command_say_so_and_the_offer_works(
    starved, experiment, engineer, engineer_client, client, api_token_for
):
    page = engineer_client.get(f"/policies/{starved.pk}/").content.decode()
    card = page[
        page.index('id="holdout-warning"') : page.index("</section>", page.index('id="holdout-warning"'))
    ]
    assert "<b>speculation everywhere with ngram k=4</b> beats this policy" in card
    assert 'name="alternative" value="all_on:ngram k=4"' in card and "(n=20)" in card
    api = client.get(f"/api/policies/{starved.pk}", **api_token_for(engineer)).json()
    warning = api["holdout_warning"]
    assert warning["alternative"] == "all_on:ngram k=4" and warning["lo_s"] > 0 and warning["n"] == 20
    assert warning["offer"]["api"] == f"/api/policies/{starved.pk}/adopt"
    out = io.StringIO()
    call_command(
        "fit_policy", str(experiment.pk), "--user", engineer.username, "--min-support", "50", stdout=out
    )
    assert (
        "WARNING: on holdout, speculation everywhere with ngram k=4 beats this policy by +" in out.getvalue()
    )

    response = engineer_client.post(f"/policies/{starved.pk}/adopt/", {"alternative": "all_on:ngram k=4"})
    adopted = SlicePolicy.objects.latest("pk")
    assert response.status_code == 302 and response["Location"] == f"/policies/{adopted.pk}/"
    on, default = adopted.rules["rules"]
    assert on == {
        "when": {"model": "synthetic"},
        "arm": "ngram k=4",
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 4},
    }
    assert default == {"when": {}, "arm": None, "speculative_config": None}
    assert adopted.fit_details["adopted"]["from_policy"] == starved.pk
    assert adopted.holdout_scores["share_on"] == 1.0 and adopted.params == starved.params
    page = engineer_client.get(f"/policies/{adopted.pk}/").content.decode()
    allowed = set(TASKS) | {"interactive", "batch"}
    assert findings(visible_text(card), allowed) == [] and findings(visible_text(page), allowed) == []
    assert (
        'id="adopted"' in page and "not an independent check" in page and 'id="holdout-warning"' not in page
    )
    by_api = client.post(
        f"/api/policies/{starved.pk}/adopt",
        data=json.dumps({"alternative": "all_on:ngram k=2"}),
        content_type="application/json",
        **api_token_for(engineer),
    )
    assert by_api.status_code == 201 and by_api.json()["rules"][0]["arm"] == "ngram k=2"


@pytest.mark.django_db
def test_no_warning_when_the_policy_holds_its_own(
    experiment, engineer, engineer_client, client, api_token_for
):
    policy = policy_fit_stored(experiment=experiment, created_by=engineer)
    assert any(r["arm"] for r in policy.rules["rules"])
    page = engineer_client.get(f"/policies/{policy.pk}/").content.decode()
    assert 'id="holdout-warning"' not in page and 'id="alternatives"' in page
    assert (
        client.get(f"/api/policies/{policy.pk}", **api_token_for(engineer)).json()["holdout_warning"] is None
    )
    out = io.StringIO()
    call_command("fit_policy", str(experiment.pk), "--user", engineer.username, stdout=out)
    assert "WARNING" not in out.getvalue()


@pytest.mark.django_db
def test_the_offer_refuses_what_the_policy_did_not_score(
    starved, engineer, engineer_client, viewer_client, client, api_token_for
):
    before = SlicePolicy.objects.count()
    for data in ({"alternative": "all_on:no such arm"}, {"alternative": ""}, {}, {"alternative": "x" * 400}):
        response = engineer_client.post(f"/policies/{starved.pk}/adopt/", data)
        assert response.status_code == 400 and response.content.decode().startswith("alternative: "), data
    assert viewer_client.post(f"/policies/{starved.pk}/adopt/", {"alternative": ALL_OFF}).status_code == 403
    assert engineer_client.get(f"/policies/{starved.pk}/adopt/").status_code == 405
    token = api_token_for(engineer)
    for body in (
        {"alternative": "all_on:nope"},
        {"alternative": ""},
        {"alternative": "a\u0000b"},
        {"other": 1},
        {},
    ):
        response = client.post(
            f"/api/policies/{starved.pk}/adopt",
            data=json.dumps(body),
            content_type="application/json",
            **token,
        )
        assert response.status_code == 400, body
        assert "alternative" in json.dumps(response.json()) or "other" in body, body
    assert SlicePolicy.objects.count() == before


@pytest.mark.django_db
def test_a_policy_stored_before_the_check_says_it_was_not_measured(starved, viewer_client):
    starved.holdout_scores = {k: v for k, v in starved.holdout_scores.items() if k != "alternatives"}
    starved.save()
    page = viewer_client.get(f"/policies/{starved.pk}/").content.decode()
    assert 'id="holdout-warning"' not in page and "stored before its holdout was checked" in page
