"""Rollouts start from a signed decision: the decisions' fixtures, and a real Prometheus scraping
a drifting metrics server with three pools (a control, a candidate, and the control's twin)."""

from __future__ import annotations

import pytest

from tests.decisions.conftest import experiment, fast_password_hashing, signed  # noqa: F401
from tests.support.prometheus import drifting_metrics, prometheus_server

POOLS = ("baseline", "candidate", "twin")


@pytest.fixture(scope="module")
def metrics():
    with drifting_metrics(seed=5, pools=POOLS) as server:
        yield server


@pytest.fixture(scope="module")
def prometheus_url(metrics):
    with prometheus_server(targets=[metrics.target]) as url:
        yield url


@pytest.fixture
def registered(settings, prometheus_url):
    settings.SPECREVIEW_PROMETHEUS = {"test": {"url": prometheus_url, "bearer_token_file": ""}}
    return "test"
