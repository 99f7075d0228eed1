"""Calibration, small version: the intervals hold their stated coverage on simulated experiments
with a known truth, and the gate does not pass A/A experiments (the full table:
``manage.py calibrate``, docs/statistics.md). Bounds are widened by their Monte Carlo error."""

from __future__ import annotations

import io
import json
import math

import pytest
from django.core.management import call_command

from console.decisions import calibration

SIMS = 25


def _bound(p: float, m: int, sign: int) -> float:
    return p + sign * 2 * math.sqrt(p * (1 - p) / max(m, 1))


@pytest.fixture(scope="module")
def small():
    pool = calibration.pool_shipped()
    return calibration.calibrate(pool, sims=SIMS, seed=3, n_boot=500, repeats=(1, 3), requests=(30, 100))


@pytest.mark.slow
def test_it_holds_coverage_and_false_significance_where_a_percentile_is_reported(small):
    # Percentiles (the gate's primary endpoints). Means are reported by calibrate too; on the
    # shipped recording's heavy-tailed host noise they come out near 0.92 with 3 repeats at
    # n = 100 (docs/statistics.md): a known gap, not asserted here.
    reported = [r for r in small["scenarios"] if r["measured"] and not r["metric"].endswith(":mean")]
    assert reported, "nothing was reported"
    for r in reported:
        m = r["measured"]
        assert r["coverage"] >= _bound(calibration.TARGETS["coverage"], m, -1), r
        assert r["false_significant_rate"] <= _bound(calibration.TARGETS["false_significant_rate"], m, +1), r


@pytest.mark.slow
def test_it_withholds_p95_below_forty_requests_and_the_gate_refuses_a_a(small):
    by = {(r["name"], r["metric"]): r for r in small["scenarios"]}
    assert by[("aa-r1-n30", "tpot_s:p95")]["not_measured_rate"] == 1.0
    assert by[("aa-r3-n100", "tpot_s:p95")]["not_measured_rate"] == 0.0
    for r in small["scenarios"]:
        if r["gate_false_pass_rate"] is not None:
            assert r["gate_false_pass_rate"] <= _bound(calibration.TARGETS["gate_false_pass_rate"], SIMS, +1), r
    # One repeat: no noise floor, so the gate's latency criterion cannot pass even on a real effect.
    assert by[("effect-r1-n100", "tpot_s:p95")]["gate_pass_rate"] == 0.0


def test_it_catches_an_interval_that_is_too_narrow(monkeypatch):
    # The check can fail: a studentized interval that forgets the t quantile (half width 0.5 se)
    # loses its coverage on means, and calibrate reports it.
    from console.analysis.comparison import intervals as bootstrap

    real = bootstrap.interval_studentized

    def narrow(boot, *, point, n_requests, ci=0.95):
        lo, hi, se = real(boot, point=point, n_requests=n_requests, ci=ci)
        return point - 0.25 * (hi - lo) / 2, point + 0.25 * (hi - lo) / 2, se

    monkeypatch.setattr(bootstrap, "interval_studentized", narrow)
    pool = calibration.pool_shipped()
    rows = calibration.scenario_run(pool, n=100, repeats=1, effect=0.0, sims=20, seed=5, n_boot=300)
    mean = next(r for r in rows if r["metric"] == "tpot_s:mean")
    assert mean["coverage"] < 0.8


def test_it_prints_the_scenarios_as_json():
    out = io.StringIO()
    call_command("calibrate", "--sims", "2", "--repeats", "1", "--requests", "30", "--pool", "shipped", "--json", stdout=out)
    data = json.loads(out.getvalue())
    row = data["scenarios"][0]
    assert {"name", "repeats", "requests", "metric", "coverage", "false_significant_rate", "not_measured_rate",
            "gate_false_pass_rate"} <= set(row)
    assert {r["name"] for r in data["scenarios"]} == {"aa-r1-n30", "effect-r1-n30"}
    assert data["pool"]["source"].startswith("shipped")
