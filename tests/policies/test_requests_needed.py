"""How many more requests would decide a slice left off only for lack of data (issue 23): the
pure function against hand-computed cases, a simulation of what the number means, and the page."""

from __future__ import annotations

import numpy as np
import pytest

from console.policies.fitting import INTERVAL_CROSSES_ZERO
from console.policies.pairs import benefit_interval
from console.policies.requests_needed import (
    INSIDE_FLOOR,
    NO_INTERVAL,
    ZERO_EFFECT,
    RequestsNeeded,
    requests_needed,
    slice_requests_needed,
)
from console.policies.services import policy_fit
from tests.support.synthetic import TASKS, experiment_synthesize
from tests.test_page_numbers import findings, visible_text


@pytest.mark.parametrize(
    ("n", "effect", "half_width", "floor", "expected"),
    [
        (20, 0.002, 0.004, 0.0, RequestsNeeded(80, 60, None)),  # 20 x (4 / 2)^2
        (20, -0.002, 0.004, 0.0, RequestsNeeded(80, 60, None)),  # a loss is decided the same way
        (20, 0.003, 0.004, 0.001, RequestsNeeded(80, 60, None)),  # clear the floor, not just zero
        (10, 0.005, 0.006, 0.0, RequestsNeeded(15, 5, None)),  # ceil(14.4)
        (30, 0.004, 0.002, 0.0, RequestsNeeded(30, 0, None)),  # already decided
        (20, 0.001, 0.004, 0.001, RequestsNeeded(None, None, INSIDE_FLOOR)),
        (20, 0.0, 0.004, 0.0, RequestsNeeded(None, None, ZERO_EFFECT)),
        (20, float("nan"), 0.004, 0.0, RequestsNeeded(None, None, NO_INTERVAL)),
        (1, 0.002, 0.004, 0.0, RequestsNeeded(None, None, NO_INTERVAL)),
        (20, 0.002, 0.0, 0.0, RequestsNeeded(None, None, NO_INTERVAL)),
    ],
)
def test_it_scales_the_half_width_by_one_over_root_n(n, effect, half_width, floor, expected):
    assert requests_needed(n=n, effect=effect, half_width=half_width, floor=floor) == expected


def test_it_reads_a_slice_the_fit_evaluated():
    row = {"n": 20, "benefit": 0.002, "lo": -0.002, "hi": 0.006}
    assert slice_requests_needed(row) == RequestsNeeded(80, 60, None)
    assert slice_requests_needed({"n": 3, "benefit": 0.002, "lo": None, "hi": None}).reason == NO_INTERVAL


def _share_deciding(rng, *, effect: float, sd: float, n: int, draws: int = 600) -> float:
    """Share of ``draws`` experiments of ``n`` requests whose interval excludes zero."""
    samples = rng.normal(effect, sd, size=(draws, n))
    return float(np.mean([benefit_interval(s, stat="mean")[1] > 0 for s in samples]))


def test_at_the_number_given_the_interval_excludes_zero_about_half_the_time():
    """The meaning the docs give N: if the true effect is the one observed, an experiment of N
    requests decides it about half the time, and one of 2N about 80% of the time."""
    rng = np.random.default_rng(23)
    shares, doubled = [], []
    for _ in range(8):
        pilot = rng.normal(0.002, 0.008, 15)  # a slice like issue 23's: its interval crosses zero
        point, lo, hi = benefit_interval(pilot, stat="mean")
        if lo > 0:
            continue
        need = requests_needed(n=15, effect=point, half_width=(hi - lo) / 2)
        assert need.n_needed is not None and need.n_needed > 15
        sd = float(pilot.std(ddof=1))
        shares.append(_share_deciding(rng, effect=abs(point), sd=sd, n=need.n_needed))
        doubled.append(_share_deciding(rng, effect=abs(point), sd=sd, n=2 * need.n_needed))
    assert len(shares) >= 5
    assert 0.45 <= min(shares) and max(shares) <= 0.7
    assert min(doubled) >= 0.72


@pytest.mark.django_db
def test_the_page_says_per_slice_how_many_more_requests_would_decide_it(engineer, viewer_client):
    experiment = experiment_synthesize(n_requests=60, ks=(2,), loads="1x", repeats=1, seed=4, name="needed")
    policy = policy_fit(experiment=experiment, min_support=50, created_by=engineer)
    undecided = {"when": {"task": "code"}, "arm": "ngram k=2", "n_requests": 20, "n": 20, "benefit": 0.002}
    undecided |= {
        "lo": -0.002,
        "hi": 0.006,
        "lost_successes": 0.0,
        "regressions": 0,
        "why_not": INTERVAL_CROSSES_ZERO,
    }
    regressed = undecided | {"when": {"task": "json"}, "regressions": 2, "why_not": "2 quality regression(s)"}
    policy.fit_details = {**policy.fit_details, "candidates": [undecided, regressed]}
    policy.save()
    page = viewer_client.get(f"/policies/{policy.pk}/").content.decode()
    text = "about 60 more requests (80 in all) would show it faster, if the effect holds"
    assert page.count(text) == 2  # in the slice's row and as the nearest undecided slice
    assert findings(visible_text(page), set(TASKS) | {"interactive", "batch"}) == []
    assert "1 slice left off only for lack of data" in page
    rows = page[page.index('id="considered"') :].split("<tr>")
    json_row = next(r for r in rows if "task = json" in r)
    assert '<td class="requests-needed"></td>' in json_row  # a regression is not a lack of data
