"""Layout that fits (issue 22, point 6): at 1024 and 1440 px no element of the main pages spills
out of its card (chart titles wrap), and the headline table keeps the CTO's columns in view at
1024 px. Screenshots of each page at each width (whole, and its first screen) go to
var/screenshots/; the README's are copied from there (docs/img/)."""

from __future__ import annotations

import pytest

from tests.browser.test_console_browser import _login, page  # noqa: F401  (fixture)
from tests.conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = ROOT / "var" / "screenshots"

# Every element drawn past its card's right edge; a table inside a .table-wrap scrolls by design.
OVERFLOW = """() => {
  const out = [];
  for (const card of document.querySelectorAll('main .card')) {
    const edge = card.getBoundingClientRect().right + 1;
    for (const el of card.querySelectorAll('*')) {
      const wrap = el.closest('.table-wrap');
      if (wrap && wrap !== el && card.contains(wrap)) continue;
      const box = el.getBoundingClientRect();
      if (box.width > 0 && box.right > edge)
        out.push(`${card.id || card.className}: <${el.tagName.toLowerCase()}> ${(el.textContent || '').trim().slice(0, 50)}`);
    }
  }
  return out;
}"""

# The headline's header cells wholly inside the table's visible (unscrolled) width.
VISIBLE_HEADERS = """() => {
  const wrap = document.querySelector('#headline .table-wrap');
  const right = wrap.getBoundingClientRect().right;
  return Array.from(wrap.querySelectorAll('thead th')).filter(th => th.getBoundingClientRect().right <= right + 1)
    .map(th => th.textContent.trim());
}"""


def test_nothing_spills_out_of_its_card_and_the_ctos_columns_stay_in_view(page, live_server, engineer, viewer):  # noqa: F811
    from console.analysis.services import comparison_refresh
    from console.decisions import services
    from console.policies.services import policy_fit
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=60, ks=(2, 4), loads="1x,2x", repeats=2)
    comparison_refresh(experiment_id=experiment.pk, n_boot=100)
    policy = policy_fit(experiment=experiment, created_by=engineer)
    decision = services.decision_create(
        experiment=experiment, author=engineer, title="Keep it off", proposal="keep_off", candidate_arm=None,
        traffic_class="interactive",
    )
    _login(page, live_server, viewer)
    SHOTS.mkdir(parents=True, exist_ok=True)
    pages = {
        "comparison": f"/analysis/experiments/{experiment.pk}/",
        "policy": f"/policies/{policy.pk}/",
        "decision": f"/decisions/{decision.pk}/",
        "experiment": f"/experiments/{experiment.pk}/",
    }
    for width in (1024, 1440):
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in pages.items():
            page.goto(f"{live_server.url}{path}")
            if name == "comparison":
                page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 9")
                visible = page.evaluate(VISIBLE_HEADERS)
                assert {"Arm", "e2e p95", "TPOT p95", "$/successful task", "quality regressions"} <= set(visible), visible
            page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
            page.screenshot(path=str(SHOTS / f"{name}-{width}-first-screen.png"))  # what a reader sees first
            assert page.evaluate(OVERFLOW) == [], (name, width)
