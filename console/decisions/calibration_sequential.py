"""Calibration of the run-until-decided stopping rule (:mod:`console.experiments.sequential`).

The same generative model, pool and truths as the fixed designs (:mod:`.calibration`): each
simulated experiment draws ``n`` requests and ``MAX_REPEATS`` repeats of both arms, then is
looked at after 2, 3, ... ``MAX_REPEATS`` repeats, as the experiment would be, on the repeats
run so far. At each look the primary endpoint's interval comes from the comparison's own code
(``bootstrap_distributions`` with the request as the unit, ``paired_delta``, the A/A floor of
``noise_floors``), with the same replicates ``paired_stage`` draws for it
(``tests/decisions/test_calibration_sequential.py`` checks they agree to the last digit).

Three designs are scored on the same simulated data:

* **sequential**: the rule, intervals at the Bonferroni-over-looks level ``1 - alpha / K``;
* **fixed**: every repeat run (``MAX_REPEATS``), one look, the comparison's 95% interval and the
  same decision words (what an experiment with ``repeats = MAX_REPEATS`` reports);
* **naive**: the rule with unadjusted 95% intervals at every look (for contrast: no guarantee).

Truths: A/A (0), a planted 20% effect, and a 3% effect, inside the equivalence margin (10% of the
baseline's population value of the statistic). Per design: ``coverage`` of the interval at the
look it stopped, ``false_decision_rate`` (better when the truth is >= 0, worse when it is <= 0,
equivalent when ``|truth| >= margin``), how often it decided each way, and the mean repeats run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from console.analysis.comparison.bootstrap import bootstrap_distributions, point_stat
from console.analysis.comparison.intervals import paired_delta
from console.analysis.comparison.noise import noise_floors
from console.decisions.calibration import TARGETS, Pool, experiment_simulate, population
from console.experiments.sequential import DECIDED, Look, Plan, look_outcome, stop_decide

MAX_REPEATS = 5
FIRST_LOOK = 2
ALPHA = 0.05
MARGIN_REL = 0.10  # equivalence margin: this fraction of the baseline's population value
SEQ_METRICS: tuple[tuple[str, str], ...] = (("tpot_s", "p95"), ("tpot_s", "mean"))
SEQ_REQUESTS: tuple[int, ...] = (100, 300)
SEQ_EFFECTS: tuple[float, ...] = (0.0, 0.2, 0.03)
DESIGNS = ("sequential", "fixed", "naive")
# paired_stage seeds the first load's bootstrap so: the same replicates as the real comparison.
LOAD_SEED_STEP = 104729


def looks_compute(
    derived: pd.DataFrame,
    *,
    metrics: Sequence[tuple[str, str]],
    levels: Sequence[float],
    n_boot: int,
    seed: int,
) -> dict[tuple[str, str], list[dict[float, Look]]]:
    """Per metric, per look (repeats ``FIRST_LOOK``..max in ``derived``): the primary endpoint at
    each confidence level in ``levels`` (the same replicates for every level)."""
    max_r = int(derived["repeat"].max()) + 1
    cols = sorted({m for m, _ in metrics})
    out: dict[tuple[str, str], list[dict[float, Look]]] = {key: [] for key in metrics}
    for r in range(FIRST_LOOK, max_r + 1):
        sub = derived[derived["repeat"] < r]
        base = sub[sub["arm"] == "baseline"]
        cand = sub[sub["arm"] == "candidate"].set_index(["request_id", "repeat"])
        universe = pd.MultiIndex.from_frame(base[["request_id", "repeat"]])
        cand = cand.reindex(universe)
        floors = {
            (f["metric"], f["stat"]): f["noise_floor"]
            for f in noise_floors(base, stats={m: tuple(s for mm, s in metrics if mm == m) for m in cols})
        }
        columns: dict[Hashable, np.ndarray] = {
            (m, arm): frame[m].to_numpy(dtype=float)
            for m in cols
            for arm, frame in (("b", base), ("c", cand))
        }
        stats: dict[Hashable, Sequence[str]] = {
            (m, arm): tuple(s for mm, s in metrics if mm == m) for m in cols for arm in ("b", "c")
        }
        codes, _ = pd.factorize(universe.get_level_values("request_id").to_numpy())
        boots = bootstrap_distributions(
            columns, stats=stats, clusters=codes, n_boot=n_boot, seed=seed + LOAD_SEED_STEP
        )
        n_req = int(codes.max()) + 1
        for m, s in metrics:
            b, c = columns[(m, "b")], columns[(m, "c")]
            by_level = {}
            for level in levels:
                d = paired_delta(
                    stat=s,
                    base_point=point_stat(b, s),
                    cand_point=point_stat(c, s),
                    base_boot=boots[((m, "b"), s)],
                    cand_boot=boots[((m, "c"), s)],
                    n_requests=n_req,
                    ci=level,
                )
                floor = floors.get((m, s))
                by_level[level] = Look(
                    repeats=r,
                    delta=float(d["delta"]),  # type: ignore[arg-type]
                    lo=float(d["delta_lo"]),  # type: ignore[arg-type]
                    hi=float(d["delta_hi"]),  # type: ignore[arg-type]
                    noise_floor=None if floor is None else float(floor),
                )
            out[(m, s)].append(by_level)
    return out


def _false(outcome: str, truth: float, margin: float) -> bool:
    """A decision the truth contradicts (latencies: lower is better)."""
    return (
        (outcome == "better" and truth >= 0)
        or (outcome == "worse" and truth <= 0)
        or (outcome == "equivalent" and abs(truth) >= margin)
    )


def _stopped(looks: list[Look], plan: Plan) -> tuple[str, Look]:
    """(outcome, the look it stopped at) of the rule run look by look."""
    for i in range(len(looks)):
        stop = stop_decide(looks[: i + 1], plan=plan)
        if stop.stopped:
            return stop.outcome, looks[i]
    raise AssertionError("the rule must stop at max_repeats")  # stop_decide always does


def scenario_sequential(
    pool: Pool,
    *,
    n: int,
    effect: float,
    sims: int,
    seed: int,
    n_boot: int,
    metrics: Sequence[tuple[str, str]],
) -> list[dict[str, Any]]:
    """One truth x request count: ``sims`` simulated experiments scored under every design; one
    row per metric x design."""
    pop = population(pool, effect=effect, seed=seed + 1)
    plans = {
        key: Plan(
            max_repeats=MAX_REPEATS, first_look=FIRST_LOOK, alpha=ALPHA, margin=MARGIN_REL * pop[key][0]
        )
        for key in metrics
    }
    level = plans[metrics[0]].level
    rng = np.random.default_rng(seed)
    tally = {
        (key, d): {"covered": 0, "false": 0, "repeats": 0} | dict.fromkeys((*DECIDED, "undecided"), 0)
        for key in metrics
        for d in DESIGNS
    }
    for s in range(sims):
        derived = experiment_simulate(pool, n=n, repeats=MAX_REPEATS, effect=effect, rng=rng)
        all_looks = looks_compute(
            derived, metrics=metrics, levels=(level, 0.95), n_boot=n_boot, seed=seed * 7919 + s
        )
        for key in metrics:
            plan = plans[key]
            truth = 0.0 if effect == 0 else pop[key][1] - pop[key][0]
            fixed_look = all_looks[key][-1][0.95]
            fixed = look_outcome(fixed_look, plan=plan)
            results = {
                "sequential": _stopped([lk[level] for lk in all_looks[key]], plan),
                "fixed": ("undecided" if fixed == "continue" else fixed, fixed_look),
                "naive": _stopped([lk[0.95] for lk in all_looks[key]], plan),
            }
            for design, (outcome, look) in results.items():
                t = tally[(key, design)]
                t["covered"] += look.lo <= truth <= look.hi
                t["false"] += _false(outcome, truth, plan.margin or 0.0)
                t["repeats"] += look.repeats
                t[outcome] += 1
    kind = (
        "A/A"
        if effect == 0
        else f"effect {effect:.0%}" + (" (inside the margin)" if effect < MARGIN_REL else "")
    )
    rows = []
    for (key, design), t in tally.items():
        truth = 0.0 if effect == 0 else pop[key][1] - pop[key][0]
        rows.append(
            {
                "name": f"seq-{'aa' if effect == 0 else f'e{round(effect * 100)}'}-n{n}",
                "kind": kind,
                "design": design,
                "requests": n,
                "max_repeats": MAX_REPEATS,
                "level": level if design == "sequential" else 0.95,
                "metric": f"{key[0]}:{key[1]}",
                "truth": truth,
                "margin": plans[key].margin,
                "simulations": sims,
                "coverage": t["covered"] / sims,
                "false_decision_rate": t["false"] / sims,
                "mean_repeats": t["repeats"] / sims,
                **{f"{o}_rate": t[o] / sims for o in (*DECIDED, "undecided")},
            }
        )
    return rows


def calibrate_sequential(
    pool: Pool,
    *,
    sims: int,
    seed: int,
    n_boot: int,
    requests: Sequence[int] = SEQ_REQUESTS,
    effects: Sequence[float] = SEQ_EFFECTS,
    metrics: Sequence[tuple[str, str]] = SEQ_METRICS,
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, Any]:
    """Every truth x request count; ``{"pool", "params", "targets", "scenarios", "failures",
    "within_monte_carlo_error"}`` as :func:`.calibration.calibrate`, the targets (coverage >= 0.93,
    false decisions <= 0.06) checked for the sequential and the fixed designs (the naive one is
    there to show what the adjustment buys, not held to them)."""
    rows: list[dict[str, Any]] = []
    for i, (effect, n) in enumerate((e, n) for e in effects for n in requests):
        t = time.perf_counter()
        rows += scenario_sequential(
            pool, n=n, effect=effect, sims=sims, seed=seed + 1000 * i, n_boot=n_boot, metrics=metrics
        )
        if progress:
            progress(rows[-1]["name"], time.perf_counter() - t)
    failures: list[str] = []
    within: list[str] = []
    for row in rows:
        if row["design"] == "naive":
            continue
        for key, target_key, sign in (
            ("coverage", "coverage", -1),
            ("false_decision_rate", "false_significant_rate", +1),
        ):
            value, target = row[key], TARGETS[target_key]
            if sign * (value - target) <= 0:
                continue
            label = f"{row['name']} {row['design']} {row['metric']}: {key} {value:.3f}"
            if abs(value - target) > 2 * math.sqrt(target * (1 - target) / row["simulations"]):
                failures.append(label)
            else:
                within.append(label + " (within 2 Monte Carlo errors of the target)")
    return {
        "pool": {"source": pool.source, "requests": len(pool.frame), "repeats": pool.repeats},
        "params": {
            "sims": sims,
            "seed": seed,
            "n_boot": n_boot,
            "max_repeats": MAX_REPEATS,
            "first_look": FIRST_LOOK,
            "alpha": ALPHA,
            "margin_rel": MARGIN_REL,
        },
        "targets": {
            "coverage": TARGETS["coverage"],
            "false_decision_rate": TARGETS["false_significant_rate"],
        },
        "scenarios": rows,
        "failures": sorted(failures),
        "within_monte_carlo_error": sorted(within),
    }
