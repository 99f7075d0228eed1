"""The rollout page in real Chromium: a rollout of a signed decision against a real Prometheus
scraping the drifting metrics server, with a regression planted in the candidate's TPOT, looked
at until it breaches. At 1440 px nothing spills out of its cards. The screenshots go to
var/screenshots/ (rollout-full.png, and rollout.png down to the prediction table), and the
latter to docs/img/rollout.png (the README's) with SPECREVIEW_SCREENSHOTS_TO_DOCS=1."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from console.rollouts import services
from console.rollouts.evaluation import rollout_evaluate
from console.rollouts.models import Rollout
from tests.browser.test_console_browser import _login, page  # noqa: F401  (fixture)
from tests.browser.test_layout_browser import OVERFLOW, SHOTS
from tests.conftest import ROOT
from tests.rollouts.conftest import experiment, metrics, prometheus_url, registered, signed  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WINDOW_MIN = 0.05  # a look every 3 s: Prometheus scrapes every second
MAX_LOOKS = 12
DOCS_IMG = ROOT / "docs" / "img"


def _breached(decision, actor) -> Rollout:
    rollout = services.rollout_start(
        decision=decision,
        actor=actor,
        prometheus="test",
        candidate_pool='pool="candidate"',
        control_pool='pool="baseline"',
        stages=[{"share": 10, "minutes": 30}, {"share": 50, "minutes": 60}],
    )
    short = [t | {"window_min": WINDOW_MIN, "min_samples": 3} for t in rollout.triggers]
    Rollout.objects.filter(pk=rollout.pk).update(triggers=short)
    deadline = time.monotonic() + MAX_LOOKS * WINDOW_MIN * 60 + 30
    while (
        time.monotonic() < deadline
        and Rollout.objects.filter(pk=rollout.pk, state=Rollout.State.RUNNING).exists()
    ):
        time.sleep(WINDOW_MIN * 60 / 2)
        rollout_evaluate(rollout_id=rollout.pk)
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.BREACHED, rollout.reason
    return rollout


def test_the_rollout_page_shows_a_breach_and_fits_its_cards(
    page,  # noqa: F811
    live_server,
    signed,  # noqa: F811
    engineer,
    metrics,  # noqa: F811
    registered,  # noqa: F811
):
    metrics.set(pool="candidate", tpot_median_s=0.030)  # p95 about 15 ms above the control's
    try:
        rollout = _breached(signed, engineer)
    finally:
        metrics.set(pool="candidate", tpot_median_s=0.020)
    _login(page, live_server, engineer)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server.url}/decisions/{signed.pk}/rollouts/{rollout.pk}/")
    assert page.locator("#rollout-lead .badge.fail").inner_text() == "paused: rollback recommended"
    assert "rollback recommended" in page.locator("#rollout-lead .notice").inner_text()
    assert page.locator("#triggers svg.spark").count() == len(rollout.triggers)
    assert page.locator("#triggers .badge:text-is('breach')").count() >= 1
    assert page.locator("#prediction tbody tr").count() >= 1
    assert page.evaluate(OVERFLOW) == []
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "rollout-full.png"), full_page=True)
    # The README's: the lead with the breach, the triggers and production against the prediction.
    bottom = page.evaluate(
        "document.querySelector('#prediction').getBoundingClientRect().bottom + window.scrollY"
    )
    shot = SHOTS / "rollout.png"
    page.screenshot(
        path=str(shot), full_page=True, clip={"x": 0, "y": 0, "width": 1440, "height": bottom + 24}
    )
    if os.environ.get("SPECREVIEW_SCREENSHOTS_TO_DOCS") == "1":
        shutil.copyfile(shot, DOCS_IMG / "rollout.png")
