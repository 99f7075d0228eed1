"""The release gate: five criteria computed from the comparison, never typed in.

Pure functions over plain dicts; no Django. Each criterion returns
``{"key", "title", "status" ("pass" | "fail" | "not_measured"), "summary", "numbers", "evidence",
"notes"}``; ``numbers`` is a list of ``{"label", "value", "unit"}`` rows (the figures behind the
verdict), ``evidence`` a list of ``{"label", "anchor"}`` (a section of the comparison page).

Pass only on evidence
---------------------
A criterion is ``not_measured`` whenever its inputs are missing: no noise floor (one baseline
repeat), a load in scope without data, too few requests of the promised class for the declared
statistic, no applicable quality check, a single load level for the stability criterion, a
baseline whose repeats disagree. ``not_measured`` never becomes ``pass``: the overall verdict is
``pass`` only when every criterion passes, and approving anything else needs an override reason.

Facts (the gate's only input besides its settings)
--------------------------------------------------
``gate_facts_from_summary`` is the one place that reads the comparison (schema
``console.analysis.comparison.schema``, version 2); every criterion reads only these facts:

- ``baseline_arm``, ``candidate_arm``, ``loads`` (labels in the experiment's order),
  ``endpoints`` (declared before the run: promised class, primary latency metric and statistic,
  success metric, alpha).
- ``comparisons``: the candidate's paired rows (``DeltaRow``) per load, ``traffic_class`` None
  for all requests or the class of a traffic-class slice; with ``p_holm`` on the primary
  endpoints (Holm over every candidate arm x load). Plus ``successes_per_accelerator_hour`` per
  load from the runs (Welch interval), on the accelerator-hours the comparison measured: its
  ``cost_basis`` (``"busy_time"``: each run's seconds with a request in flight; ``"capacity"``
  where a capacity search ran) is a fact too, None for a comparison from before busy time.
- ``capacity``: None without a capacity search, else ``{"slo", "candidate", "baseline"}``, each
  arm's row of the comparison's ``capacity`` section (``rate_multiplier``, ``interval``,
  ``ratio``, ``ratio_interval``, ``n_repeats``) or None when its search has no finished step.
- ``load_weights``: the workload weights the experiment declared on its load levels ({} = none).
- ``has_noise_floor`` (the baseline has two or more repeats somewhere), ``baseline_stability``
  (``stable`` True / False / None, ``message``).
- ``quality``: None when no check applied, else ``{"exact_expected", "checks": [{"slice" (task),
  "load", "check", "n", "regressions", "improvements", "mcnemar_p", "baseline_flip_rate"}]}``
  (complete counts, never a truncated list). Graded correctness (``summary["correctness"]``,
  check ``"correct"``: baseline right, candidate wrong) joins these checks.
- ``headline`` (point estimates frozen into the evidence), ``acceptance_rate_min``, ``memory``,
  ``stats_reported``, ``acceptance_by_task`` (read by the checklist).
- ``not_speculating``: the comparison's reasons, one per load, why the candidate (configured to
  speculate) drafted nothing at all (the summary's ``speculation`` rows flagged
  ``did_not_speculate``). The gate refuses to pass on such a candidate: its latency criterion
  (or, for a slice policy, its holdout criterion) fails with that reason.

Settings (per decision; validated by :func:`gate_settings_validate`)
-------------------------------------------------------------------
``success_margin`` (criterion 1's non-inferiority margin on the success rate, a fraction,
default 0.01), ``load_weights`` ({load: weight}: the workload mix over load levels; it
overrides the weights the experiment declared on its load levels; neither declared = equal
weights, said in criterion 1's reason as "equal weights (none declared)"; missing loads weigh 1), ``loads_in_scope`` (empty = all), ``guard_latency_metrics``
(``"metric:stat"`` of the promised class that must not get worse, criterion 2),
``quality_thresholds`` ({task: max regression rate}, ``"*"`` for the others), ``memory_fraction``,
``memory_capacity_bytes``, ``stability_metrics`` (criterion 5). Every value that differs from
``DEFAULT_SETTINGS`` is a deviation, listed on the decision page, in exports and in the bundle.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

PASS, FAIL, NOT_MEASURED = "pass", "fail", "not_measured"

CRITERIA: tuple[tuple[str, str], ...] = (
    ("task_improvement", "Workload-weighted improvement in acceptable completed tasks"),
    ("latency_benefit", "Clear latency benefit for the promised class"),
    ("quality", "No regression in critical quality"),
    ("memory_headroom", "Memory headroom"),
    ("load_stability", "Stable across load levels"),
)
POLICY_CRITERION = ("policy_holdout", "The slice policy pays on held-out traffic")
TITLES = dict([*CRITERIA, POLICY_CRITERION])

HIGHER_IS_BETTER = frozenset(
    {
        "success",
        "met_deadline",
        "goodput_rps",
        "successes_per_accelerator_hour",
        "completed_rps",
        "output_tokens_per_s",
        "attainment",
        "acceptance_rate",
    }
)
VALIDITY_CHECKS: tuple[str, ...] = ("json_valid", "schema_valid", "tool_valid")
LATENCY_METRICS: tuple[str, ...] = ("ttft_s", "tpot_s", "e2e_s", "itl_chunk_mean_s")
STAT_NAMES: tuple[str, ...] = ("mean", "p50", "p95", "p99")
STABILITY_METRIC_NAMES: tuple[str, ...] = (*LATENCY_METRICS, "success", "met_deadline", "successes_per_accelerator_hour")
EFFICIENCY_METRIC = "successes_per_accelerator_hour"
MAX_SUCCESS_MARGIN = 0.2  # a "not worse" that allows more than 20 points is no longer a guard
# What criterion 1 prices successes on; the comparison's ``cost_basis`` must say the same.
COST_BASES = {
    "busy_time": "busy accelerator-hours (each run's seconds with a request in flight)",
    "capacity": "capacity at the SLO (the highest arrival rate each arm sustains within its SLO, from a capacity search)",
}

DEFAULT_SETTINGS: dict[str, Any] = {
    "success_margin": 0.01,
    "load_weights": {},
    "loads_in_scope": [],
    "guard_latency_metrics": ["ttft_s:p95", "e2e_s:p95"],
    "quality_thresholds": {"json": 0.0, "tool_call": 0.0, "*": 0.01},
    "memory_fraction": 0.9,
    "memory_capacity_bytes": None,
    "stability_metrics": [
        "tpot_s:p95",
        "e2e_s:p95",
        "ttft_s:p95",
        "success:mean",
        "met_deadline:mean",
        "successes_per_accelerator_hour:mean",
    ],
}
MAX_CAPACITY_BYTES = 2**50  # 1 PiB: anything above is a typo


class GateSettingsError(ValueError):
    """Invalid gate settings: ``errors`` lists one message per field."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def _metric_stat_list(value: Any, *, field: str, metrics: Sequence[str], errors: list[str]) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        errors.append(f"{field}: a list of 'metric:stat' strings")
        return []
    out = []
    for v in value:
        metric, _, stat = v.partition(":")
        if metric not in metrics or stat not in STAT_NAMES:
            errors.append(
                f"{field}: {v!r} is not 'metric:stat' with metric in {', '.join(metrics)} and stat in "
                f"{', '.join(STAT_NAMES)}"
            )
        else:
            out.append(v)
    if len(set(out)) != len(out):
        errors.append(f"{field}: duplicates")
    return out


def gate_settings_validate(settings: Mapping[str, Any] | None, *, loads: Sequence[str] | None = None) -> dict[str, Any]:
    """The settings a user typed, checked: known keys only, known metric names, weights >= 0,
    thresholds and fractions within bounds, loads among ``loads`` (when given). Returns them
    normalised (only the keys given); raises :class:`GateSettingsError` listing every problem."""
    errors: list[str] = []
    if settings is None:
        return {}
    if not isinstance(settings, Mapping):
        raise GateSettingsError(["gate settings: a JSON object"])
    out: dict[str, Any] = {}
    known_loads = [str(x) for x in loads] if loads is not None else None
    for key, value in settings.items():
        if key not in DEFAULT_SETTINGS:
            errors.append(f"{key}: unknown gate setting (known: {', '.join(DEFAULT_SETTINGS)})")
            continue
        if key == "success_margin":
            if not _finite(value) or not 0 <= float(value) <= MAX_SUCCESS_MARGIN:
                errors.append(f"success_margin: a fraction between 0 and {MAX_SUCCESS_MARGIN}")
            else:
                out[key] = float(value)
        elif key == "load_weights":
            if not isinstance(value, Mapping):
                errors.append("load_weights: an object {load: weight}")
                continue
            weights = {}
            for load, w in value.items():
                if known_loads is not None and str(load) not in known_loads:
                    errors.append(f"load_weights: unknown load {load!r} (the experiment has {', '.join(known_loads)})")
                elif not _finite(w) or not 0 <= float(w) <= 1e6:
                    errors.append(f"load_weights.{load}: a number between 0 and 1e6")
                else:
                    weights[str(load)] = float(w)
            if weights and sum(weights.values()) <= 0:
                errors.append("load_weights: weights sum to zero")
            out[key] = weights
        elif key == "loads_in_scope":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                errors.append("loads_in_scope: a list of load labels")
                continue
            unknown = [v for v in value if known_loads is not None and v not in known_loads]
            if unknown:
                errors.append(f"loads_in_scope: unknown load {', '.join(unknown)} (the experiment has {', '.join(known_loads or [])})")
            out[key] = list(dict.fromkeys(value))
        elif key == "guard_latency_metrics":
            out[key] = _metric_stat_list(value, field=key, metrics=LATENCY_METRICS, errors=errors)
        elif key == "stability_metrics":
            out[key] = _metric_stat_list(value, field=key, metrics=STABILITY_METRIC_NAMES, errors=errors)
            if isinstance(value, list) and not value:
                errors.append("stability_metrics: at least one metric (an empty list would switch the criterion off)")
        elif key == "quality_thresholds":
            if not isinstance(value, Mapping) or not value:
                errors.append("quality_thresholds: an object {task: max regression rate}")
                continue
            thresholds = {}
            for task, t in value.items():
                if not isinstance(task, str) or not task or len(task) > 100:
                    errors.append("quality_thresholds: task names are non-empty strings")
                elif not _finite(t) or not 0 <= float(t) <= 0.5:
                    errors.append(f"quality_thresholds.{task}: a fraction between 0 and 0.5")
                else:
                    thresholds[task] = float(t)
            out[key] = thresholds
        elif key == "memory_fraction":
            if not _finite(value) or not 0 < float(value) <= 1:
                errors.append("memory_fraction: a fraction above 0 and at most 1")
            else:
                out[key] = float(value)
        elif key == "memory_capacity_bytes":
            if value is None:
                out[key] = None
            elif not _finite(value) or not 0 < float(value) <= MAX_CAPACITY_BYTES:
                errors.append("memory_capacity_bytes: a positive number of bytes (at most 1 PiB)")
            else:
                out[key] = int(value)
    if errors:
        raise GateSettingsError(errors)
    return out


def gate_settings_resolve(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """DEFAULT_SETTINGS overlaid with ``settings`` (stored settings are not re-validated here;
    unknown keys are kept, so they stay visible as deviations)."""
    out = {
        k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
        for k, v in DEFAULT_SETTINGS.items()
    }
    for key, value in (settings or {}).items():
        if value is None and key != "memory_capacity_bytes":
            continue
        out[key] = value
    return out


def gate_settings_deviations(settings: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Every setting that differs from its default: ``{"key", "default", "value", "note"}``."""
    resolved = gate_settings_resolve(settings)
    out = []
    for key, value in resolved.items():
        default = DEFAULT_SETTINGS.get(key, "(not a gate setting)")
        if key not in DEFAULT_SETTINGS:
            out.append({"key": key, "default": None, "value": value, "note": "unknown setting, ignored"})
        elif value != default:
            out.append({"key": key, "default": default, "value": value, "note": ""})
    return out


# ---------------------------------------------------------------- the one adapter over the summary


HEADLINE_FIELDS: tuple[str, ...] = (
    "n_requests",
    "n_failed",
    "ttft_s_p95",
    "tpot_s_p50",
    "tpot_s_p95",
    "e2e_s_p95",
    "e2e_s_p99",
    "goodput_rps",
    "deadline_attainment",
    "acceptance_rate",
    "mean_acceptance_length",
    "tokens_per_pass",
    "accepted_per_pass",
    "cost_per_success_usd",
    "cost_per_million_output_tokens_usd",
    "peak_memory_bytes",
    "n_regressions",
)
ROW_KEYS: tuple[str, ...] = (
    "metric",
    "stat",
    "base",
    "cand",
    "delta",
    "delta_lo",
    "delta_hi",
    "ratio",
    "ratio_lo",
    "ratio_hi",
    "p_value",
    "p_holm",
    "n_requests",
    "measured",
    "reason",
    "noise_floor",
    "verdict",
    "role",
)


def gate_facts_from_summary(
    summary: Mapping[str, Any] | None,
    *,
    candidate_arm: str | None,
    traffic_class: str,
    exact_expected: bool = False,
    capacity_bytes: float | None = None,
) -> dict[str, Any]:
    """Facts for candidate ``candidate_arm`` from a comparison summary (schema version 2). The
    one function that knows that schema; see the module docstring for what it returns."""
    summary = summary or {}
    baseline = summary.get("baseline_arm")
    headline = [h for h in summary.get("headline") or [] if isinstance(h, Mapping)]
    loads = [str(x) for x in summary.get("load_order") or []]
    for h in headline:
        if str(h.get("load")) not in loads:
            loads.append(str(h.get("load")))
    stats: set[str] = set()
    for h in headline:
        stats |= {str(d.get("stat")) for d in h.get("deltas") or [] if d.get("measured")}
    acceptance = summary.get("acceptance") or {}
    floors = summary.get("noise_floor") or []
    stability = summary.get("baseline_stability") or {}
    facts: dict[str, Any] = {
        "schema_version": summary.get("schema_version"),
        "baseline_arm": baseline,
        "candidate_arm": candidate_arm,
        "loads": loads,
        "endpoints": dict(summary.get("endpoints") or {}),
        "comparisons": [],
        "has_noise_floor": any(int(f.get("n_repeat_pairs") or 0) > 0 for f in floors),
        "baseline_stability": {"stable": stability.get("stable"), "message": stability.get("message")},
        "quality": None,
        "memory": None,
        "stats_reported": sorted(stats),
        "acceptance_by_task": bool(acceptance.get("by_task")) if isinstance(acceptance, Mapping) else False,
        "notes": [],
        "headline": [],
        "acceptance_rate_min": None,
        "not_speculating": [],
        "kv": [],
        "cost_basis": summary.get("cost_basis"),
        "load_weights": dict(summary.get("load_weights") or {}),
        "capacity": None,
    }
    if not candidate_arm:
        return facts
    capacity = summary.get("capacity")
    if isinstance(capacity, Mapping):
        by_arm = {a.get("arm"): a for a in capacity.get("arms") or [] if isinstance(a, Mapping)}
        facts["capacity"] = {
            "slo": capacity.get("slo"),
            "candidate": by_arm.get(candidate_arm),
            "baseline": by_arm.get(baseline),
        }
    facts["not_speculating"] = [
        str(row.get("reason") or f"server did not speculate at load {row.get('load')}")
        for row in summary.get("speculation") or []
        if isinstance(row, Mapping) and row.get("arm") == candidate_arm and row.get("did_not_speculate")
    ]
    comparisons: list[dict[str, Any]] = facts["comparisons"]
    for h in headline:
        if h.get("arm") != candidate_arm:
            continue
        for d in h.get("deltas") or []:
            comparisons.append({k: d.get(k) for k in ROW_KEYS} | {"load": str(h["load"]), "traffic_class": None})
    for r in summary.get("slices") or []:
        if r.get("arm") != candidate_arm or r.get("dimension") != "traffic_class":
            continue
        for d in r.get("deltas") or []:
            comparisons.append(
                {k: d.get(k) for k in ROW_KEYS} | {"load": str(r.get("load")), "traffic_class": r.get("value")}
            )
    comparisons += _per_run_rows(summary.get("runs") or [], candidate_arm=candidate_arm, baseline_arm=baseline)
    facts["quality"] = _quality_facts(summary, candidate_arm=candidate_arm, exact_expected=exact_expected)
    facts["headline"] = [
        {"arm": h.get("arm"), "load": h.get("load")} | {k: h.get(k) for k in HEADLINE_FIELDS}
        for h in headline
        if h.get("arm") in (candidate_arm, baseline)
    ]
    rates = [
        float(h["acceptance_rate"])
        for h in headline
        if h.get("arm") == candidate_arm and _finite(h.get("acceptance_rate"))
    ]
    facts["acceptance_rate_min"] = min(rates) if rates else None
    peaks: dict[str, list[float]] = {"baseline": [], "candidate": []}
    for h in headline:
        who = "candidate" if h.get("arm") == candidate_arm else "baseline" if h.get("arm") == baseline else None
        if who and _finite(h.get("peak_memory_bytes")):
            peaks[who].append(float(h["peak_memory_bytes"]))
    if peaks["candidate"]:
        facts["memory"] = {
            "baseline_peak_bytes": max(peaks["baseline"]) if peaks["baseline"] else None,
            "candidate_peak_bytes": max(peaks["candidate"]),
            "capacity_bytes": capacity_bytes,
        }
    facts["kv"] = _kv_facts(summary.get("kv") or [], candidate_arm=candidate_arm, baseline_arm=baseline)
    return facts


def _kv_facts(rows: Iterable[Any], *, candidate_arm: str, baseline_arm: str | None) -> list[dict[str, Any]]:
    """Per load where the candidate recorded KV figures (an engine that preallocates its KV cache):
    ``load``, ``candidate`` and ``baseline`` (the comparison's ``kv`` rows, baseline None if absent)."""
    mine: dict[str, dict[str, Any]] = {}
    base: dict[str, Mapping[str, Any]] = {}
    for r in rows:
        if not isinstance(r, Mapping):
            continue
        if r.get("arm") == candidate_arm:
            mine[str(r.get("load"))] = {"load": str(r.get("load")), "candidate": dict(r), "baseline": None}
        elif r.get("arm") == baseline_arm:
            base[str(r.get("load"))] = r
    for load, fact in mine.items():
        fact["baseline"] = dict(base[load]) if load in base else None
    return list(mine.values())


def _ratio_from_delta(row: Mapping[str, Any]) -> dict[str, Any]:
    base = row.get("base")
    if not (_finite(base) and base):
        return {"ratio": None, "ratio_lo": None, "ratio_hi": None}
    return {
        k: (1 + row[src] / base if _finite(row.get(src)) else None)
        for k, src in (("ratio", "delta"), ("ratio_lo", "delta_lo"), ("ratio_hi", "delta_hi"))
    }


def _per_run_rows(runs: Iterable[Mapping[str, Any]], *, candidate_arm: str, baseline_arm: str | None) -> list[dict]:
    """``successes_per_accelerator_hour`` (successful requests per accelerator-hour) per load:
    Welch t interval on the difference of the per-run means when both arms have two runs."""
    from scipy import stats as sps

    values: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        hours, ok = r.get("accelerator_hours"), r.get("successes")
        if r.get("arm") not in (candidate_arm, baseline_arm) or not (_finite(hours) and hours > 0 and _finite(ok)):
            continue
        who = "cand" if r.get("arm") == candidate_arm else "base"
        values.setdefault((str(r.get("load")), who), []).append(float(ok) / float(hours))
    rows = []
    for load in sorted({load for load, _ in values}):
        b, c = values.get((load, "base"), []), values.get((load, "cand"), [])
        if not b or not c:
            continue
        mb, mc = sum(b) / len(b), sum(c) / len(c)
        row: dict[str, Any] = {
            "load": load,
            "traffic_class": None,
            "metric": "successes_per_accelerator_hour",
            "stat": "mean",
            "base": mb,
            "cand": mc,
            "delta": mc - mb,
            "delta_lo": None,
            "delta_hi": None,
            "noise_floor": None,
            "measured": False,
            "reason": "needs two runs per arm",
            "n_runs": [len(b), len(c)],
        }
        if len(b) >= 2 and len(c) >= 2:
            vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
            vc = sum((x - mc) ** 2 for x in c) / (len(c) - 1) / len(c)
            se = math.sqrt(vb + vc)
            if se > 0:
                df = (vb + vc) ** 2 / ((vb**2 / (len(b) - 1)) + (vc**2 / (len(c) - 1)))
                half = float(sps.t.ppf(0.975, df)) * se
            else:
                half = 0.0
            row["delta_lo"], row["delta_hi"] = mc - mb - half, mc - mb + half
            row["measured"], row["reason"] = True, None
        row |= _ratio_from_delta(row)
        rows.append(row)
    return rows


def _quality_facts(summary: Mapping[str, Any], *, candidate_arm: str, exact_expected: bool) -> dict[str, Any] | None:
    quality = summary.get("quality") or {}
    correctness = summary.get("correctness") or {}
    checks = []
    # Graded correctness ("correct": baseline right, candidate wrong) counts like any check.
    counts = [*(quality.get("counts") or []), *(correctness.get("counts") or [])]
    for r in counts:
        if r.get("arm") != candidate_arm:
            continue
        if r.get("check") == "exact_match" and not exact_expected:
            continue
        checks.append(
            {
                "slice": str(r.get("task")),
                "load": str(r.get("load")),
                "check": r.get("check"),
                "n": int(r.get("n_applicable") or 0),
                "regressions": int(r.get("regressions") or 0),
                "improvements": int(r.get("improvements") or 0),
                "mcnemar_p": r.get("mcnemar_p"),
                "baseline_flip_rate": r.get("baseline_flip_rate"),
            }
        )
    if not checks:
        return None
    return {"exact_expected": exact_expected, "checks": checks}


def memory_capacity_from_hardware(hardware: Iterable[Mapping[str, Any]]) -> float | None:
    """Memory capacity in bytes from run hardware records (``workers.hardware``): the smallest
    GPU's memory on GPU hosts (the summary's peak is GPU memory there), else host memory."""
    gpu, host = [], []
    for hw in hardware:
        for g in hw.get("gpus") or []:
            if _finite(g.get("memory_bytes")):
                gpu.append(float(g["memory_bytes"]))
        if _finite(hw.get("memory_bytes")):
            host.append(float(hw["memory_bytes"]))
    if gpu:
        return min(gpu)
    return min(host) if host else None


# ---------------------------------------------------------------- helpers


def _finite(x: Any) -> TypeGuard[float]:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _result(key: str, status: str, summary: str, numbers: list, evidence: list, notes: list | None = None):
    return {
        "key": key,
        "title": TITLES[key],
        "status": status,
        "summary": summary,
        "numbers": numbers,
        "evidence": evidence,
        "notes": notes or [],
    }


def _num(label: str, value: Any, unit: str = "") -> dict[str, Any]:
    if isinstance(value, float) and not math.isfinite(value):
        value = None
    return {"label": label, "value": value, "unit": unit}


def _in_scope(load: str, settings: Mapping[str, Any]) -> bool:
    scope = settings.get("loads_in_scope") or []
    return not scope or load in scope


def _scope(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> list[str]:
    return list(settings.get("loads_in_scope") or []) or list(facts.get("loads") or [])


def _rows(facts: Mapping[str, Any], *, metric: str, stat: str | None, traffic_class: str | None) -> list[dict]:
    return [
        r
        for r in facts.get("comparisons") or []
        if r.get("metric") == metric
        and (stat is None or r.get("stat") == stat)
        and r.get("traffic_class") == traffic_class
    ]


def _unit(metric: str) -> str:
    if metric.endswith("_s"):
        return "s"
    if metric.endswith("_rps"):
        return "req/s"
    if metric == "successes_per_accelerator_hour":
        return "tasks/accel-h"
    if metric in ("success", "met_deadline"):
        return "fraction"
    return ""


def comparison_direction(row: Mapping[str, Any]) -> str:
    """``"better"``, ``"worse"``, ``"not distinguishable"`` or ``"not measured"`` for a
    comparison row: measured, the interval excludes zero and ``|delta|`` exceeds a known noise
    floor. Without a floor a row is ``"not measured"`` here: the gate needs the margin."""
    delta, lo, hi = row.get("delta"), row.get("delta_lo"), row.get("delta_hi")
    if row.get("measured") is False or not (_finite(delta) and _finite(lo) and _finite(hi)):
        return "not measured"
    if lo <= 0 <= hi:
        return "not distinguishable"
    floor = row.get("noise_floor")
    if not _finite(floor):
        return "not measured"
    if abs(delta) <= floor:
        return "not distinguishable"
    higher = row.get("metric") in HIGHER_IS_BETTER
    improved = delta > 0 if higher else delta < 0
    return "better" if improved else "worse"


def _unstable(facts: Mapping[str, Any]) -> str | None:
    stability = facts.get("baseline_stability") or {}
    if stability.get("stable") is False:
        return stability.get("message") or "baseline unstable: rerun on a quieter host"
    return None


# ---------------------------------------------------------------- the criteria


def _with_interval(r: Mapping[str, Any]) -> tuple[float, float, float] | None:
    if r.get("measured") is False:
        return None
    ratio, lo, hi = r.get("ratio"), r.get("ratio_lo"), r.get("ratio_hi")
    if not (_finite(ratio) and _finite(lo) and _finite(hi)) and _finite(r.get("base")) and r["base"]:
        derived = _ratio_from_delta(r)
        ratio, lo, hi = derived["ratio"], derived["ratio_lo"], derived["ratio_hi"]
    if _finite(ratio) and _finite(lo) and _finite(hi):
        return float(ratio), float(lo), float(hi)
    return None


def _load_weights(
    loads: Sequence[str], settings: Mapping[str, Any], facts: Mapping[str, Any] | None = None
) -> tuple[list[float], str]:
    """Normalised weights for ``loads`` from the declared workload mix and how they were chosen,
    for the reason: never silently equal. The decision's ``load_weights`` setting wins; else the
    weights the experiment declared on its load levels (``facts["load_weights"]``)."""
    declared = settings.get("load_weights") or {}
    source = "gate settings"
    if not declared:
        declared = (facts or {}).get("load_weights") or {}
        source = "the experiment's load levels"
    if not declared:
        how = "equal weights (none declared)"
    else:
        unset = [load for load in loads if load not in declared]
        how = f"declared workload weights ({source})" + (f"; {', '.join(unset)} unset: weight 1" if unset else "")
    raw = [float(declared.get(load, 1.0)) for load in loads]
    total = sum(raw)
    return ([w / total for w in raw] if total > 0 else []), how


def criterion_task_improvement(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """(1) More acceptable completed tasks per unit of accelerator time, without losing tasks:
    over the loads in scope, weighted by the workload mix,

    - the success rate is **not worse** (non-inferiority): the weighted lower bound of the
      candidate's paired success-rate difference (the declared success metric) is above
      ``-success_margin`` (default 0.01, one point; a changed margin is a deviation), and
    - **successes per busy accelerator-hour** are **better**: the weighted lower bound of the
      relative change (Welch interval over the runs) is above zero.

    Where a capacity search ran (``cost_basis`` ``"capacity"``) the second part is the capacity
    ratio instead (:func:`_task_improvement_capacity`). Otherwise accelerator-hours are the
    comparison's ``cost_basis``, busy time (each run's seconds with a request in flight), never
    the replay window: below saturation the window is the trace's
    arrival span, the same for every arm, and could not show an engine doing the same work in
    less time. Weights: ``load_weights`` (gate settings), else the experiment's declared
    weights; none declared = equal weights, stated in the reason. A weighted lower bound is the weighted sum of the
    per-load lower bounds: conservative. Not measured when the comparison has no busy time, or a
    load in scope lacks either interval (no runs, fewer than two runs per arm)."""
    key = "task_improvement"
    evidence = [{"label": "headline table", "anchor": "headline"}]
    scope = _scope(facts, settings)
    basis = facts.get("cost_basis")
    if basis not in COST_BASES:
        return _result(
            key,
            NOT_MEASURED,
            f"no busy time: the comparison's accelerator-hours are not on a known cost basis ({basis or 'none stated'}); "
            "recompute it",
            [],
            evidence,
        )
    ends = facts.get("endpoints") or {}
    s_metric, s_stat = ends.get("success_metric", "success"), ends.get("success_stat", "mean")
    margin = float(settings.get("success_margin", DEFAULT_SETTINGS["success_margin"]))
    success = {r["load"]: r for r in _rows(facts, metric=s_metric, stat=s_stat, traffic_class=None)}
    efficiency = {r["load"]: r for r in _rows(facts, metric=EFFICIENCY_METRIC, stat=None, traffic_class=None)}
    missing = []
    for load in scope:
        s_row, e_row = success.get(load), efficiency.get(load)
        if s_row is None or s_row.get("measured") is False or not (_finite(s_row.get("delta")) and _finite(s_row.get("delta_lo"))):
            missing.append(f"{load}: no {s_metric} interval" + (f" ({s_row['reason']})" if s_row and s_row.get("reason") else ""))
        if basis != "capacity" and (e_row is None or _with_interval(e_row) is None):
            why = (e_row or {}).get("reason") or "no runs with busy time"
            missing.append(f"{load}: no {EFFICIENCY_METRIC} interval ({why})")
    if not scope or missing:
        return _result(key, NOT_MEASURED, "; ".join(missing) or "no load in scope", [], evidence)
    weights, how = _load_weights(scope, settings, facts)
    if not weights:
        return _result(key, NOT_MEASURED, "load weights sum to zero", [], evidence)
    if basis == "capacity":
        return _task_improvement_capacity(facts, success=success, scope=scope, weights=weights, how=how, margin=margin)
    ratios = [_with_interval(efficiency[load]) for load in scope]
    s_est = sum(w * float(success[load]["delta"]) for w, load in zip(weights, scope, strict=True))
    s_low = sum(w * float(success[load]["delta_lo"]) for w, load in zip(weights, scope, strict=True))
    e_est = sum(w * (r[0] - 1) for w, r in zip(weights, ratios, strict=True) if r)
    e_low = sum(w * (r[1] - 1) for w, r in zip(weights, ratios, strict=True) if r)
    e_high = sum(w * (r[2] - 1) for w, r in zip(weights, ratios, strict=True) if r)
    numbers = [
        _num(f"weighted {s_metric} difference", s_est, "fraction"),
        _num(f"{s_metric} difference lower bound (must be above -margin)", s_low, "fraction"),
        _num("success margin", margin, "fraction"),
        _num("weighted change in successes per busy accelerator-hour", e_est, "fraction"),
        _num("lower bound", e_low, "fraction"),
        _num("upper bound", e_high, "fraction"),
    ]
    for w, load, r in zip(weights, scope, ratios, strict=True):
        s_row, e_row = success[load], efficiency[load]
        numbers.append(
            _num(f"{load}: {s_metric} baseline / candidate / delta [lo, hi] (weight {w:.2f})",
                 [s_row.get("base"), s_row.get("cand"), s_row.get("delta"), s_row.get("delta_lo"), s_row.get("delta_hi")],
                 "fraction")
        )
        numbers.append(_num(f"{load}: {EFFICIENCY_METRIC} baseline / candidate", [e_row.get("base"), e_row.get("cand")], _unit(EFFICIENCY_METRIC)))
        numbers.append(_num(f"{load}: ratio [lo, hi] (weight {w:.2f})", list(r or ()), "x"))
    failing = []
    if not s_low > -margin:
        failing.append(f"{s_metric} worse beyond the margin ({s_low:+.1%} <= -{margin:.1%})")
    if not e_low > 0:
        failing.append("successes per busy accelerator-hour not better: interval not above zero")
    summary = (
        f"{EFFICIENCY_METRIC} (cost basis {basis}: {COST_BASES[basis]}): weighted change {e_est:+.1%} "
        f"(interval {e_low:+.1%} to {e_high:+.1%}); {s_metric} difference {s_est:+.1%} (lower bound {s_low:+.1%}, "
        f"margin {margin:.1%}); {how}"
    )
    notes = [f"cost basis: {COST_BASES[basis]}, never the replay window", f"weights: {how}"]
    if failing:
        return _result(key, FAIL, summary + ": " + "; ".join(failing), numbers, evidence, notes)
    return _result(key, PASS, summary, numbers, evidence, notes)


def _task_improvement_capacity(
    facts: Mapping[str, Any],
    *,
    success: Mapping[str, Mapping[str, Any]],
    scope: Sequence[str],
    weights: Sequence[float],
    how: str,
    margin: float,
) -> dict[str, Any]:
    """Criterion 1 on capacity at the SLO: success not worse (the weighted non-inferiority of
    :func:`criterion_task_improvement`) and the capacity ratio candidate / baseline above 1: the
    lower end of its interval (``comparison.capacity``: candidate low / baseline high of the
    repeats' bracket envelopes) strictly above 1, i.e. the candidate met the SLO at a rate above
    every rate at which the baseline failed it. An end a search left open is not measured, except
    a candidate that met the SLO at no tested rate while the baseline did: that fails."""
    key = "task_improvement"
    evidence = [{"label": "capacity at the SLO", "anchor": "capacity"}, {"label": "headline table", "anchor": "headline"}]
    ends = facts.get("endpoints") or {}
    s_metric = ends.get("success_metric", "success")
    cap = facts.get("capacity") or {}
    cand, base = cap.get("candidate"), cap.get("baseline")
    if not cand or not base:
        who = "candidate" if not cand else "baseline"
        return _result(key, NOT_MEASURED, f"capacity search: no finished search of the {who}", [], evidence)
    ratio = cand.get("ratio")
    r_lo, r_hi = (list(cand.get("ratio_interval") or []) + [None, None])[:2]
    s_est = sum(w * float(success[load]["delta"]) for w, load in zip(weights, scope, strict=True))
    s_low = sum(w * float(success[load]["delta_lo"]) for w, load in zip(weights, scope, strict=True))
    slo = cap.get("slo") or {}
    numbers = [
        _num(f"weighted {s_metric} difference", s_est, "fraction"),
        _num(f"{s_metric} difference lower bound (must be above -margin)", s_low, "fraction"),
        _num("success margin", margin, "fraction"),
        _num("baseline capacity [interval]", [base.get("rate_multiplier"), *(base.get("interval") or [None, None])], "x trace rate"),
        _num("candidate capacity [interval]", [cand.get("rate_multiplier"), *(cand.get("interval") or [None, None])], "x trace rate"),
        _num("capacity ratio candidate / baseline", ratio, "x"),
        _num("ratio interval lower end (must be above 1)", r_lo, "x"),
        _num("ratio interval upper end", r_hi, "x"),
        _num("repeats (baseline, candidate)", [base.get("n_repeats"), cand.get("n_repeats")]),
    ]
    for w, load in zip(weights, scope, strict=True):
        s_row = success[load]
        numbers.append(
            _num(f"{load}: {s_metric} baseline / candidate / delta [lo, hi] (weight {w:.2f})",
                 [s_row.get("base"), s_row.get("cand"), s_row.get("delta"), s_row.get("delta_lo"), s_row.get("delta_hi")],
                 "fraction")
        )
    slo_text = ", ".join(f"{k} {v}" for k, v in slo.items())
    notes = [f"cost basis: {COST_BASES['capacity']}", f"SLO: {slo_text}", f"weights: {how}"]
    failing = []
    if not s_low > -margin:
        failing.append(f"{s_metric} worse beyond the margin ({s_low:+.1%} <= -{margin:.1%})")
    if not _finite(r_lo):
        if (cand.get("interval") or [None])[0] is None and base.get("rate_multiplier") is not None:
            failing.append("the candidate met the SLO at no tested rate, the baseline did")
        else:
            why = "the baseline met the SLO at every tested rate: raise the bracket's hi" if (base.get("interval") or [None, None])[1] is None else "a search found no passing rate"
            return _result(key, NOT_MEASURED, f"capacity ratio interval open ({why})", numbers, evidence, notes)
    elif not r_lo > 1:
        failing.append(f"capacity not better: ratio interval lower end {r_lo:.3g} not above 1")
    summary = (
        f"capacity at the SLO ({slo_text}): candidate / baseline {ratio if ratio is None else f'{ratio:.3g}'}x "
        f"(interval {r_lo if not _finite(r_lo) else f'{r_lo:.3g}'} to {r_hi if not _finite(r_hi) else f'{r_hi:.3g}'}); "
        f"{s_metric} difference {s_est:+.1%} (lower bound {s_low:+.1%}, margin {margin:.1%}); {how}"
    )
    if failing:
        return _result(key, FAIL, summary + ": " + "; ".join(failing), numbers, evidence, notes)
    return _result(key, PASS, summary, numbers, evidence, notes)


def criterion_latency_benefit(facts: Mapping[str, Any], settings: Mapping[str, Any], *, traffic_class: str) -> dict[str, Any]:
    """(2) The experiment's declared primary latency metric (default p95 TPOT) of the promised
    class is better at every load in scope: measured, Holm-adjusted p-value below alpha (over
    every candidate arm x load), interval below zero and ``|delta|`` beyond the A/A noise
    floor; and no guard metric of that class (``guard_latency_metrics``: TTFT and e2e p95 by
    default) is worse beyond the floor. Not measured without a floor, with an unstable
    baseline, at a load in scope without data, or when the class has too few requests."""
    key = "latency_benefit"
    evidence = [{"label": "primary endpoints", "anchor": "primary"}, {"label": "noise floor", "anchor": "noise"}]
    ends = facts.get("endpoints") or {}
    metric, stat = ends.get("primary_metric", "tpot_s"), ends.get("primary_stat", "p95")
    alpha = float(ends.get("alpha", 0.05))
    promised = ends.get("promised_class")
    if promised and promised != traffic_class:
        return _result(
            key,
            NOT_MEASURED,
            f"the experiment declared {promised!r} as its promised class before it ran; this decision names {traffic_class!r}",
            [],
            evidence,
        )
    refusal = _not_speculating(facts)
    if refusal:
        return refusal | {"key": key, "title": TITLES[key]}
    if not facts.get("has_noise_floor"):
        return _result(key, NOT_MEASURED, "no noise floor: the baseline needs at least two repeats", [], evidence)
    unstable = _unstable(facts)
    if unstable:
        return _result(key, NOT_MEASURED, unstable, [], evidence)
    scope = _scope(facts, settings)
    numbers: list[dict[str, Any]] = []
    failing, missing = [], []
    for load in scope:
        primary = [r for r in _rows(facts, metric=metric, stat=stat, traffic_class=traffic_class) if r["load"] == load]
        if not primary:
            missing.append(f"{load}: no {traffic_class} requests")
            continue
        r = primary[0]
        v = comparison_direction(r)
        numbers.append(
            _num(
                f"{load} {traffic_class} {metric} {stat} (primary): baseline / candidate / delta [lo, hi] / floor / Holm p ({v})",
                [r.get("base"), r.get("cand"), r.get("delta"), r.get("delta_lo"), r.get("delta_hi"), r.get("noise_floor"), r.get("p_holm")],
                "s",
            )
        )
        if v == "not measured":
            missing.append(f"{load}: {r.get('reason') or 'not measured'}")
            continue
        p_holm = r.get("p_holm")
        if v != "better" or not _finite(p_holm) or p_holm >= alpha:
            failing.append(f"{load}: primary {v}" + (f", Holm p {p_holm:.3g}" if _finite(p_holm) else ""))
        for guard in settings.get("guard_latency_metrics") or []:
            g_metric, _, g_stat = guard.partition(":")
            rows = [g for g in _rows(facts, metric=g_metric, stat=g_stat, traffic_class=traffic_class) if g["load"] == load]
            if not rows:
                missing.append(f"{load}: guard {guard} has no comparison")
                continue
            gv = comparison_direction(rows[0])
            numbers.append(
                _num(
                    f"{load} {traffic_class} {guard} (guard): delta [lo, hi] / floor ({gv})",
                    [rows[0].get("delta"), rows[0].get("delta_lo"), rows[0].get("delta_hi"), rows[0].get("noise_floor")],
                    "s",
                )
            )
            if gv == "worse":
                failing.append(f"{load}: {guard} worse beyond the floor")
            elif gv == "not measured":
                missing.append(f"{load}: guard {guard} {rows[0].get('reason') or 'not measured'}")
    if failing:
        return _result(key, FAIL, f"no clear latency benefit for {traffic_class}: " + "; ".join(failing), numbers, evidence, missing)
    if missing or not scope:
        return _result(key, NOT_MEASURED, "; ".join(missing) or "no load in scope", numbers, evidence)
    return _result(
        key,
        PASS,
        f"{traffic_class} {metric} {stat} better beyond the noise floor at every load in scope (Holm-adjusted), no guard worse",
        numbers,
        evidence,
    )


def _not_speculating(facts: Mapping[str, Any]) -> dict[str, Any] | None:
    """A failing result when the candidate, configured to speculate, drafted nothing (server
    counters or per-request metrics say so): what it measured is the baseline again, so no
    benefit it shows can be speculative decoding's."""
    reasons = [str(r) for r in facts.get("not_speculating") or []]
    if not reasons:
        return None
    evidence = [{"label": "speculation check", "anchor": "speculation"}]
    return _result("latency_benefit", FAIL, "; ".join(reasons), [], evidence)


def criterion_quality(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """(3) From complete counts, per task and check over the loads in scope: the regression
    rate (baseline valid, candidate not) is at most the task's threshold plus the baseline's own
    flip rate between repeats, and the candidate is not significantly worse by McNemar's exact
    test (regressions > improvements at p < 0.05). Exact match counts only when exact output is
    expected (greedy). Graded correctness (check ``correct``) is one more check, under the same
    thresholds. Not measured when no request was checkable."""
    key = "quality"
    evidence = [{"label": "quality regressions", "anchor": "quality"}]
    quality = facts.get("quality") or {}
    checks = [c for c in quality.get("checks") or [] if _in_scope(c.get("load"), settings)]
    if not checks or sum(int(c.get("n") or 0) for c in checks) == 0:
        return _result(key, NOT_MEASURED, "no request had an applicable quality check", [], evidence)
    thresholds = settings["quality_thresholds"]
    grouped: dict[tuple[str, str], dict[str, Any]] = {}
    for c in checks:
        g = grouped.setdefault((c["slice"], c["check"]), {"n": 0, "regressions": 0, "improvements": 0, "flips": []})
        g["n"] += int(c.get("n") or 0)
        g["regressions"] += int(c.get("regressions") or 0)
        g["improvements"] += int(c.get("improvements") or 0)
        if _finite(c.get("baseline_flip_rate")):
            g["flips"].append(float(c["baseline_flip_rate"]))
    numbers, failing = [], []
    total_reg = total_imp = 0
    for (task, check), g in sorted(grouped.items()):
        if g["n"] == 0:
            continue
        limit = float(thresholds.get(task, thresholds.get("*", 0.0)))
        flip = max(g["flips"]) if g["flips"] else 0.0
        rate = g["regressions"] / g["n"]
        p = _mcnemar(g["regressions"], g["improvements"])
        total_reg += g["regressions"]
        total_imp += g["improvements"]
        numbers.append(
            _num(
                f"{task} {check}: regressions / improvements / checked (limit {limit:.2%} + baseline flips {flip:.2%})",
                [g["regressions"], g["improvements"], g["n"]],
            )
        )
        if rate > limit + flip:
            failing.append(f"{task} {check} {g['regressions']}/{g['n']}")
        elif p is not None and p < 0.05 and g["regressions"] > g["improvements"]:
            failing.append(f"{task} {check}: significantly more regressions than improvements (McNemar p {p:.3g})")
    notes = [] if quality.get("exact_expected") else ["exact match not required (sampled decoding)"]
    if failing:
        return _result(key, FAIL, "regressions above threshold: " + "; ".join(failing), numbers, evidence, notes)
    return _result(
        key, PASS, f"{total_reg} regressions, {total_imp} improvements, all tasks within their thresholds", numbers, evidence, notes
    )


def _mcnemar(regressions: int, improvements: int) -> float | None:
    from scipy.stats import binomtest

    n = regressions + improvements
    return float(binomtest(regressions, n, 0.5).pvalue) if n else None


def criterion_memory_headroom(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """(4) What the candidate's drafter costs in memory.

    Where the engine preallocates its KV cache (vLLM: the candidate's runs recorded KV figures,
    ``facts["kv"]``), peak device memory is the same for every arm, so this judges KV pressure
    instead (:func:`_kv_headroom`). Elsewhere (hf on CPU): candidate peak memory (bytes, the
    worker process's resident memory on CPU hosts) at most ``memory_fraction`` of capacity.
    """
    if facts.get("kv"):
        return _kv_headroom(facts, settings)
    key = "memory_headroom"
    evidence = [{"label": "memory per arm", "anchor": "memory"}]
    memory = facts.get("memory") or {}
    peak = memory.get("candidate_peak_bytes")
    capacity = settings.get("memory_capacity_bytes") or memory.get("capacity_bytes")
    fraction = float(settings["memory_fraction"])
    if not _finite(peak):
        return _result(key, NOT_MEASURED, "candidate peak memory not measured", [], evidence)
    numbers = [
        _num("candidate peak", peak, "bytes"),
        _num("baseline peak", memory.get("baseline_peak_bytes"), "bytes"),
        _num("capacity", capacity, "bytes"),
        _num("allowed fraction", fraction, "fraction"),
    ]
    if not _finite(capacity) or capacity <= 0:
        return _result(key, NOT_MEASURED, "memory capacity unknown (set it in the gate settings)", numbers, evidence)
    used = peak / capacity
    numbers.append(_num("candidate peak / capacity", used, "fraction"))
    ok = used <= fraction
    return _result(key, PASS if ok else FAIL, f"peak {used:.1%} of capacity (limit {fraction:.0%})", numbers, evidence)


def _kv_headroom(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """(4) on an engine that preallocates its KV cache: per load, the candidate's preemptions per
    run (mean) not higher than the baseline's beyond the A/A floor (the largest difference
    between two baseline repeats); with one baseline repeat that part is not measured. The KV
    capacity the drafter took (candidate KV tokens vs the baseline's, a fraction) is stated:
    it is the cost, and what it does to live requests is the preemptions' verdict."""
    key = "memory_headroom"
    evidence = [{"label": "KV cache per arm", "anchor": "kv-cache"}]
    numbers: list[dict[str, Any]] = []
    worse, unmeasured, stated = [], [], []
    for fact in facts["kv"]:
        load = fact["load"]
        if not _in_scope(load, settings):
            continue
        cand, base = fact["candidate"], fact.get("baseline") or {}
        lost = cand.get("kv_capacity_lost")
        numbers += [
            _num(f"{load}: candidate KV capacity", cand.get("kv_cache_tokens"), "tokens"),
            _num(f"{load}: baseline KV capacity", base.get("kv_cache_tokens"), "tokens"),
            _num(f"{load}: KV capacity lost", lost, "fraction"),
        ]
        if _finite(lost):
            stated.append(f"{lost:.1%} KV capacity lost at {load}")
        c, b, floor = cand.get("preemptions"), base.get("preemptions"), base.get("preemptions_floor")
        numbers += [
            _num(f"{load}: candidate preemptions per run", c, "count"),
            _num(f"{load}: baseline preemptions per run", b, "count"),
            _num(f"{load}: A/A floor (baseline repeats)", floor, "count"),
        ]
        if not (_finite(c) and _finite(b)):
            unmeasured.append(f"preemptions not counted at {load}")
        elif not _finite(floor):
            unmeasured.append(f"preemptions {c - b:+.1f} per run at {load} with no A/A floor (one baseline repeat)")
        elif c - b > floor:
            worse.append(f"{c - b:+.1f} preemptions per run at {load} (A/A floor {floor:g})")
    capacity = "; ".join(stated) or "KV capacity lost not measured"
    if worse:
        return _result(key, FAIL, f"more preemptions than the baseline beyond noise: {'; '.join(worse)}; {capacity}", numbers, evidence)
    if unmeasured or not numbers:
        why = "; ".join(unmeasured) or "no load in scope recorded KV figures"
        return _result(key, NOT_MEASURED, f"{why}; {capacity}", numbers, evidence)
    return _result(key, PASS, f"preemptions within the A/A floor at every load; {capacity}", numbers, evidence)


def criterion_load_stability(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """(5) Across at least two load levels in scope, each with measured comparisons and a noise
    floor: no load where the candidate is significantly worse beyond the floor on any stability
    metric. A worse load outside ``loads_in_scope`` is reported but does not fail. Not measured
    with one load level, without a floor, or with an unstable baseline."""
    key = "load_stability"
    evidence = [{"label": "headline table", "anchor": "headline"}, {"label": "TPOT vs load", "anchor": "tpot-vs-load"}]
    scope = _scope(facts, settings)
    if len(scope) < 2:
        return _result(key, NOT_MEASURED, f"{len(scope)} load level in scope: nothing to compare across loads", [], evidence)
    if not facts.get("has_noise_floor"):
        return _result(key, NOT_MEASURED, "no noise floor: the baseline needs at least two repeats", [], evidence)
    unstable = _unstable(facts)
    if unstable:
        return _result(key, NOT_MEASURED, unstable, [], evidence)
    numbers: list[dict[str, Any]] = []
    worse_in: list[str] = []
    worse_out: list[str] = []
    measured_loads: set[str] = set()
    for spec in settings["stability_metrics"]:
        metric, _, stat = spec.partition(":")
        for r in _rows(facts, metric=metric, stat=stat or None, traffic_class=None):
            v = comparison_direction(r)
            if v == "not measured":
                continue
            measured_loads.add(r["load"])
            if v == "worse":
                label = f"{r['load']} {metric} {r['stat']}"
                numbers.append(_num(f"{label}: delta [lo, hi] / floor", [r.get("delta"), r.get("delta_lo"), r.get("delta_hi"), r.get("noise_floor")], _unit(metric)))
                (worse_in if r["load"] in scope else worse_out).append(label)
    notes = [f"worse outside the proposal's scope (allowed): {', '.join(worse_out)}"] if worse_out else []
    if worse_in:
        return _result(key, FAIL, "significantly worse at: " + ", ".join(worse_in), numbers, evidence, notes)
    unmeasured = [load for load in scope if load not in measured_loads]
    if unmeasured:
        return _result(key, NOT_MEASURED, f"no measured comparison at load {', '.join(unmeasured)}", numbers, evidence, notes)
    numbers.insert(0, _num("loads compared", len(scope)))
    return _result(key, PASS, "no load level in scope where the candidate is significantly worse", numbers, evidence, notes)


def criterion_policy_holdout(policy: Mapping[str, Any] | None) -> dict[str, Any]:
    """(1+2 for ``enable_for_slice``) The chosen slice policy, judged on the holdout split it was
    not fitted on: its realized benefit (seconds per request over the holdout traffic: the
    workload-weighted gain) has an interval above zero, no overfitting flag (policy or rule), no
    quality regression and no lost successes under the policy there."""
    key = "policy_holdout"
    evidence = [{"label": "slice policy", "anchor": "policy"}]
    holdout = (policy or {}).get("holdout") or {}
    score = holdout.get("policy") or {}
    if not policy or not holdout.get("n_requests") or not _finite(score.get("lo")):
        return _result(key, NOT_MEASURED, "no holdout evaluation of a slice policy", [], evidence)
    flags = (policy.get("overfitting") or {})
    numbers = [
        _num("holdout requests", holdout.get("n_requests")),
        _num("share of holdout traffic on", holdout.get("share_on"), "fraction"),
        _num("holdout benefit [lo, hi]", [score.get("benefit"), score.get("lo"), score.get("hi")], "s"),
        _num("lost successes / regressions", [holdout.get("lost_successes"), holdout.get("regressions")]),
    ]
    failing = []
    if not score["lo"] > 0:
        failing.append("holdout benefit interval not above zero")
    if flags.get("policy") or flags.get("rules"):
        failing.append("overfitting: " + "; ".join(flags.get("reasons") or ["flagged"]))
    if (holdout.get("regressions") or 0) > 0:
        failing.append(f"{holdout['regressions']} quality regressions on holdout")
    if _finite(holdout.get("lost_successes")) and holdout["lost_successes"] > 0:
        failing.append(f"{holdout['lost_successes']:.0f} successes lost on holdout")
    if failing:
        return _result(key, FAIL, "; ".join(failing), numbers, evidence)
    return _result(key, PASS, f"holdout benefit {score['benefit']:.4g} s per request, interval above zero", numbers, evidence)


def _ordered(loads: Iterable[str], facts: Mapping[str, Any]) -> list[str]:
    order = {load: i for i, load in enumerate(facts.get("loads") or [])}
    return sorted(loads, key=lambda load: (order.get(load, len(order)), str(load)))


def gate_evaluate(
    facts: Mapping[str, Any],
    settings: Mapping[str, Any] | None,
    *,
    traffic_class: str,
    proposal: str = "enable_everywhere",
    policy: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """All criteria and the overall verdict: ``"pass"`` (all pass), ``"fail"`` (any fails) or
    ``"incomplete"`` (none fails, some not measured). For ``enable_for_slice`` the policy's
    holdout evaluation replaces criteria 1 and 2 (the candidate everywhere is not what ships)."""
    resolved = gate_settings_resolve(settings)
    if proposal == "enable_for_slice":
        refusal = _not_speculating(facts)
        first = [
            refusal | {"key": POLICY_CRITERION[0], "title": POLICY_CRITERION[1]}
            if refusal
            else criterion_policy_holdout(policy)
        ]
    else:
        first = [
            criterion_task_improvement(facts, resolved),
            criterion_latency_benefit(facts, resolved, traffic_class=traffic_class),
        ]
    criteria = [
        *first,
        criterion_quality(facts, resolved),
        criterion_memory_headroom(facts, resolved),
        criterion_load_stability(facts, resolved),
    ]
    statuses = {c["status"] for c in criteria}
    overall = FAIL if FAIL in statuses else PASS if statuses == {PASS} else "incomplete"
    return {
        "overall": overall,
        "criteria": criteria,
        "settings": resolved,
        "deviations": gate_settings_deviations(settings),
        "traffic_class": traffic_class,
        "proposal": proposal,
        "candidate_arm": facts.get("candidate_arm"),
        "baseline_arm": facts.get("baseline_arm"),
    }


def gate_failing(gate: Mapping[str, Any]) -> list[str]:
    """Keys of the failing criteria of a computed gate."""
    return [c["key"] for c in gate.get("criteria") or [] if c.get("status") == FAIL]


def gate_not_passing(gate: Mapping[str, Any]) -> list[str]:
    """Keys of every criterion that did not pass (failing or not measured)."""
    return [c["key"] for c in gate.get("criteria") or [] if c.get("status") != PASS]
