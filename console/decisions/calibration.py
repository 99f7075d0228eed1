"""Calibration: does every interval hold its stated coverage, and does the gate refuse noise?

Checked by simulation with a known truth, on the same inference code the comparison runs
(:func:`console.analysis.comparison.compute.inference_stages`) and the same gate
(:mod:`console.decisions.gate`). It lives with the decisions because it evaluates the gate.

The generative model
--------------------
A **pool** of recorded per-request results of one configuration: for each request its TTFT and
its generation time (e2e - TTFT, seconds) and output tokens, and, when the pool has two or more
repeats, how much each repeat deviated from the request's own mean (the host's real repeat
noise). The pool is a finished baseline run in the database when one exists, else the recording
shipped with the project (``calibration_pool.csv``: SmolLM2-135M on the demo trace's 30 prompts,
two repeats, recorded on a 2-core CPU machine).

A simulated experiment of ``n`` requests and ``R`` repeats draws ``n`` pool requests with
replacement (the requests' own difficulty, shared by every arm and repeat), then for every arm
and repeat multiplies TTFT and generation time by a resampled repeat deviation (or lognormal
noise of sd 0.1 when the pool has one repeat). A **planted effect** multiplies the candidate's
generation time by ``1 - e`` with ``e`` varying by task around ``effect`` (from half to one and a
half times it): a benefit that differs by request. The **truth** of a statistic's difference is
computed from 200,000 draws of the same process (the same draws for both arms); an **A/A**
experiment has ``effect = 0`` and a truth of exactly 0.

What is measured per scenario and metric
----------------------------------------
``coverage``: share of the simulations where the metric was reported whose interval holds the
truth; ``false_significant_rate``: share whose interval excludes zero (A/A) or excludes it on the
wrong side (planted effect); ``not_measured_rate``: share where the reporting rule withheld it;
``gate_false_pass_rate``: share of simulations where the gate's latency criterion passed (an A/A
must not); ``gate_pass_rate``: the same for planted effects (power).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TypeVar, get_args, get_origin

import numpy as np
import pandas as pd

from console.analysis.comparison.bootstrap import point_stat
from console.analysis.comparison.compute import inference_stages
from console.analysis.comparison.schema import (
    SCHEMA_VERSION,
    AcceptanceTables,
    BaselineStability,
    Correctness,
    Endpoints,
    HeadlineRow,
    LatencyCdf,
    NoiseFloorRow,
    Params,
    Quality,
    Record,
    Sessions,
    SliceCdf,
    SliceRow,
    Summary,
)
from console.decisions import gate
from console.experiments.endpoints import DEFAULT_ENDPOINTS

METRICS: tuple[tuple[str, str], ...] = (("tpot_s", "p95"), ("tpot_s", "mean"), ("e2e_s", "p95"), ("ttft_s", "p50"))
REPEATS: tuple[int, ...] = (1, 3, 5)
REQUESTS: tuple[int, ...] = (10, 30, 100, 300)
EFFECT = 0.2  # mean planted reduction of generation time (fraction)
NOISE_SD = 0.1  # log-sd of repeat noise when the pool has a single repeat
TRUTH_DRAWS = 200_000
R = TypeVar("R", bound=Record)
TARGETS = {"coverage": 0.93, "false_significant_rate": 0.06, "gate_false_pass_rate": 0.05}


@dataclass
class Pool:
    """Recorded requests: ``frame`` has ``request_id``, ``task``, ``ttft_s``, ``gen_s`` and
    ``tokens`` (one row per request: the mean over repeats); ``noise`` holds log deviations of
    (TTFT, generation time) of each recorded repeat from its request's mean (None: one repeat)."""

    frame: pd.DataFrame
    noise: np.ndarray | None
    source: str
    repeats: int = 1
    tasks: list[str] = field(default_factory=list)


def pool_from_results(results: pd.DataFrame, *, source: str) -> Pool:
    """A pool from per-request results of one arm (columns ``request_id``, ``repeat``, ``task``,
    ``ttft_s``, ``e2e_s``, ``num_output_tokens``; completed requests only)."""
    ok = results.dropna(subset=["ttft_s", "e2e_s"])
    ok = ok[(ok["num_output_tokens"] >= 2) & (ok["e2e_s"] > ok["ttft_s"]) & (ok["ttft_s"] > 0)]
    if ok["request_id"].nunique() < 5:
        raise ValueError(f"{source}: fewer than 5 completed requests with two or more tokens")
    ok = ok.assign(gen_s=ok["e2e_s"] - ok["ttft_s"])
    grouped = ok.groupby("request_id", sort=True)
    frame = pd.DataFrame(
        {
            "task": grouped["task"].first(),
            "ttft_s": grouped["ttft_s"].mean(),
            "gen_s": grouped["gen_s"].mean(),
            "tokens": grouped["num_output_tokens"].median(),
        }
    ).reset_index()
    repeats = int(ok.groupby("request_id")["repeat"].nunique().max())
    noise = None
    if repeats >= 2:
        means = frame.set_index("request_id")
        dev = np.column_stack(
            [
                np.log(ok["ttft_s"].to_numpy() / means.loc[ok["request_id"], "ttft_s"].to_numpy()),
                np.log(ok["gen_s"].to_numpy() / means.loc[ok["request_id"], "gen_s"].to_numpy()),
            ]
        )
        # n repeats around their own mean spread sqrt((n-1)/n) times less than single draws.
        noise = dev * math.sqrt(repeats / (repeats - 1))
    return Pool(frame=frame, noise=noise, source=source, repeats=repeats, tasks=sorted(frame["task"].unique()))


def pool_shipped() -> Pool:
    """The recording shipped with the project (see the module docstring)."""
    with resources.files("console.decisions").joinpath("calibration_pool.csv").open() as f:
        results = pd.read_csv(f)
    return pool_from_results(results, source="shipped recording (calibration_pool.csv)")


def _effects(pool: Pool, effect: float) -> np.ndarray:
    """Per pool request: the candidate's reduction of generation time."""
    k = len(pool.tasks)
    scale = {t: (0.5 + i / (k - 1)) if k > 1 else 1.0 for i, t in enumerate(pool.tasks)}
    return effect * pool.frame["task"].map(scale).to_numpy(dtype=float)


def _noise(pool: Pool, rng: np.random.Generator, size: int) -> np.ndarray:
    if pool.noise is not None:
        return pool.noise[rng.integers(0, len(pool.noise), size)]
    return rng.normal(0.0, NOISE_SD, size=(size, 2))


def _observe(
    pool: Pool, idx: np.ndarray, effects: np.ndarray, rng: np.random.Generator, noise: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    f = pool.frame
    noise = _noise(pool, rng, idx.size) if noise is None else noise
    ttft = f["ttft_s"].to_numpy()[idx] * np.exp(noise[:, 0])
    gen = f["gen_s"].to_numpy()[idx] * np.exp(noise[:, 1]) * (1.0 - effects[idx])
    tokens = f["tokens"].to_numpy()[idx]
    return {"ttft_s": ttft, "e2e_s": ttft + gen, "tpot_s": gen / np.maximum(tokens - 1, 1)}


def population(pool: Pool, *, effect: float, seed: int) -> dict[tuple[str, str], tuple[float, float]]:
    """(baseline, candidate) population value of every calibrated statistic (seconds), from
    ``TRUTH_DRAWS`` draws of the generative model."""
    rng = np.random.default_rng(seed)
    effects = _effects(pool, effect)
    idx = rng.integers(0, len(pool.frame), TRUTH_DRAWS)
    # The same draws of requests and noise for both arms (common random numbers): each arm's
    # distribution is exact, and the Monte Carlo error of their difference is small.
    noise = _noise(pool, rng, idx.size)
    base = _observe(pool, idx, np.zeros_like(effects), rng, noise)
    cand = _observe(pool, idx, effects, rng, noise)
    return {(m, s): (point_stat(base[m], s), point_stat(cand[m], s)) for m, s in METRICS}


def truths(pool: Pool, *, effect: float, seed: int) -> dict[tuple[str, str], float]:
    """The population difference (candidate - baseline) of every calibrated statistic."""
    if effect == 0:
        return {key: 0.0 for key in METRICS}  # A/A: the same distribution, by construction
    return {key: cand - base for key, (base, cand) in population(pool, effect=effect, seed=seed).items()}


def experiment_simulate(pool: Pool, *, n: int, repeats: int, effect: float, rng: np.random.Generator) -> pd.DataFrame:
    """A derived per-request frame of one simulated experiment (baseline and candidate, one load),
    in the columns ``inference_stages`` reads."""
    effects = _effects(pool, effect)
    idx = rng.integers(0, len(pool.frame), n)
    parts = []
    for arm, eff in (("baseline", np.zeros_like(effects)), ("candidate", effects)):
        for r in range(repeats):
            obs = _observe(pool, idx, eff, rng)
            parts.append(
                pd.DataFrame(
                    {
                        "load": "1x",
                        "arm": arm,
                        "request_id": [f"q{i}" for i in range(n)],
                        "repeat": r,
                        "ttft_s": obs["ttft_s"],
                        "tpot_s": obs["tpot_s"],
                        "e2e_s": obs["e2e_s"],
                        "itl_chunk_mean_s": obs["tpot_s"],
                        "met_deadline_f": 1.0,
                        "success": 1.0,
                        # one value per slice dimension: the inference here is about all requests
                        "task": "all",
                        "traffic_class": DEFAULT_ENDPOINTS["promised_class"],
                        "prompt_bucket": "all",
                        "output_bucket": "all",
                    }
                )
            )
    return pd.concat(parts, ignore_index=True)


def _unmeasured(model: type[R], **given: Any) -> R:
    """A row of ``model`` holding ``given``, every other field unmeasured: None where the schema
    allows it, else zero or empty (a simulated experiment counts nothing but its latencies)."""
    values: dict[str, Any] = {}
    for name, spec in model.model_fields.items():
        kind: Any = get_origin(spec.annotation) or spec.annotation  # tuple[X, ...] -> tuple
        values[name] = None if type(None) in get_args(spec.annotation) else kind()
    return model.model_validate(values | given)


def _gate_summary(inferred: dict[str, Any], *, n_boot: int, seed: int, ci: float) -> Summary:
    """The simulated experiment as the comparison the gate reads: the inference stages' paired
    rows, noise floors and baseline stability at one load; no runs, quality or capacity."""
    paired = inferred["paired"]
    headline = [
        _unmeasured(HeadlineRow, arm=arm, load=load, is_baseline=arm == "baseline", deltas=rows)
        for (arm, load), rows in paired["headline_deltas"].items()
    ]
    slices = [
        _unmeasured(SliceRow, arm=arm, load=load, dimension=dim, value=value, deltas=rows)
        for (arm, load, dim, value), rows in paired["slice_deltas"].items()
    ]
    params = Params(
        deadlines=None, cost_per_hour_usd=0.0, power_price_usd_per_kwh=None, sweeps={}, n_boot=n_boot, seed=seed,
        ci=ci, resampling_unit="request",
    )
    return Summary(
        schema_version=SCHEMA_VERSION,
        baseline_arm="baseline",
        params=params,
        endpoints=Endpoints.model_validate(DEFAULT_ENDPOINTS),
        headline=tuple(headline),
        primary=(),
        runs=(),
        spread=(),
        slices=tuple(slices),
        slice_dimensions=tuple(sorted({sl.dimension for sl in slices})),
        slice_cdf=SliceCdf(q=(), series=()),
        cdf=LatencyCdf(ttft_s=(), tpot_s=(), e2e_s=()),
        acceptance=_unmeasured(AcceptanceTables),
        speculation=(),
        kv=(),
        sessions=Sessions(by_arm_load=(), by_turn=()),
        quality=_unmeasured(Quality),
        correctness=_unmeasured(Correctness),
        cost_basis="busy_time",
        capacity=None,
        noise_floor=tuple(NoiseFloorRow.model_validate(f) for f in inferred["floors"]),
        baseline_stability=BaselineStability.model_validate(inferred["stability"]),
        knees=(),
        notes=tuple(inferred["notes"]),
        arm_order=("baseline", "candidate"),
        load_order=("1x",),
        load_weights={},
        key="",
    )


def _gate_latency(inferred: dict[str, Any], *, n_boot: int, seed: int, ci: float) -> tuple[str, str]:
    """(latency criterion status, overall gate) for the simulated candidate."""
    summary = _gate_summary(inferred, n_boot=n_boot, seed=seed, ci=ci)
    facts = gate.gate_facts_from_summary(summary, candidate_arm="candidate", traffic_class=DEFAULT_ENDPOINTS["promised_class"])
    result = gate.gate_evaluate(facts, None, traffic_class=DEFAULT_ENDPOINTS["promised_class"])
    latency = next(c for c in result["criteria"] if c["key"] == "latency_benefit")
    return latency["status"], result["overall"]


def scenario_run(
    pool: Pool, *, n: int, repeats: int, effect: float, sims: int, seed: int, n_boot: int
) -> list[dict[str, Any]]:
    """One scenario: ``sims`` simulated experiments; one result row per calibrated metric."""
    truth = truths(pool, effect=effect, seed=seed + 1)
    rng = np.random.default_rng(seed)
    tallies = {k: {"measured": 0, "covered": 0, "significant": 0} for k in METRICS}
    gate_pass = 0
    for s in range(sims):
        sim_seed = seed * 7919 + s
        derived = experiment_simulate(pool, n=n, repeats=repeats, effect=effect, rng=rng)
        inferred = inference_stages(
            derived,
            base_arm="baseline",
            endpoints=dict(DEFAULT_ENDPOINTS),  # type: ignore[arg-type]
            sweeps=None,
            n_boot=n_boot,
            seed=sim_seed,
            ci=0.95,
        )
        rows = {(d["metric"], d["stat"]): d for d in inferred["paired"]["headline_deltas"].get(("candidate", "1x"), [])}
        for key in METRICS:
            d = rows.get(key)
            if not d or not d["measured"]:
                continue
            t = tallies[key]
            t["measured"] += 1
            t["covered"] += d["delta_lo"] <= truth[key] <= d["delta_hi"]
            if effect == 0:
                t["significant"] += not (d["delta_lo"] <= 0 <= d["delta_hi"])
            else:  # significant on the wrong side: the candidate is faster, so "worse" is false
                t["significant"] += d["delta_lo"] > 0
        latency, _overall = _gate_latency(inferred, n_boot=n_boot, seed=sim_seed, ci=0.95)
        gate_pass += latency == "pass"
    name = f"{'aa' if effect == 0 else 'effect'}-r{repeats}-n{n}"
    out = []
    for (metric, stat), t in tallies.items():
        m = t["measured"]
        out.append(
            {
                "name": name,
                "kind": "A/A" if effect == 0 else f"planted effect {effect:.0%}",
                "repeats": repeats,
                "requests": n,
                "metric": f"{metric}:{stat}",
                "truth": truth[(metric, stat)],
                "simulations": sims,
                "measured": m,
                "coverage": t["covered"] / m if m else None,
                "false_significant_rate": t["significant"] / m if m else None,
                "not_measured_rate": 1 - m / sims,
                "gate_false_pass_rate": gate_pass / sims if effect == 0 else None,
                "gate_pass_rate": gate_pass / sims if effect != 0 else None,
            }
        )
    return out


def calibrate(
    pool: Pool,
    *,
    sims: int,
    seed: int,
    n_boot: int,
    repeats: Sequence[int] = REPEATS,
    requests: Sequence[int] = REQUESTS,
    effects: Iterable[float] = (0.0, EFFECT),
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, Any]:
    """Every scenario (effect x repeats x requests); ``{"pool", "scenarios": [...], "targets",
    "failures", "within_monte_carlo_error"}``: ``failures`` lists the rows that miss a target
    (``TARGETS``) by more than two Monte Carlo standard errors of their rate, the other list
    the rows beyond a target by less (what a calibrated method shows now and then)."""
    rows: list[dict[str, Any]] = []
    for i, (effect, r, n) in enumerate((e, r, n) for e in effects for r in repeats for n in requests):
        t = time.perf_counter()
        rows += scenario_run(pool, n=n, repeats=r, effect=effect, sims=sims, seed=seed + 1000 * i, n_boot=n_boot)
        if progress:
            progress(rows[-1]["name"], time.perf_counter() - t)
    failures: list[str] = []
    within: list[str] = []
    for row in rows:
        checks = (
            ("coverage", row["coverage"], -1, row["measured"]),
            ("false_significant_rate", row["false_significant_rate"], +1, row["measured"]),
            ("gate_false_pass_rate", row["gate_false_pass_rate"], +1, row["simulations"]),
        )
        for key, value, sign, m in checks:
            if value is None or not m:
                continue
            target = TARGETS[key]
            if sign * (value - target) <= 0:
                continue
            # A rate estimated from m simulations has Monte Carlo error sqrt(p(1-p)/m): a
            # perfectly calibrated interval lands below 0.93 now and then at 200 simulations.
            label = f"{row['name']} {row['metric']}: {key} {value:.3f}"
            if abs(value - target) > 2 * math.sqrt(target * (1 - target) / m):
                failures.append(label)
            else:
                within.append(label + " (within 2 Monte Carlo errors of the target)")
    return {
        "pool": {"source": pool.source, "requests": len(pool.frame), "repeats": pool.repeats},
        "params": {"sims": sims, "seed": seed, "n_boot": n_boot, "effect": EFFECT},
        "targets": TARGETS,
        "scenarios": rows,
        "failures": sorted(set(failures)),
        "within_monte_carlo_error": sorted(set(within)),
    }
