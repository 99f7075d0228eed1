"""Did each candidate speculate, and how much did it accept: per arm x load, from the best
evidence there is.

- **per-request**: the verification steps recorded per request (the ``hf`` and ``vllm``
  engines; the ``openai`` engine with ``vllm serve --per-request-spec-decode-metrics
  detailed``), reduced by :func:`console.analysis.acceptance.steps_flatten` like every other
  acceptance table.
- **run-level (server counters)**: the spec-decode counter deltas the run scraped from the
  server's ``/metrics`` (the ``openai`` engine against vLLM), summed over the group's runs.
  Used only when no request of the group recorded steps. **run-level (summed iteration
  statistics)**: the same from TensorRT-LLM's per-iteration statistics, polled through the run.
- **run-level (sampled server gauges)**: SGLang's acceptance-length gauge sampled through the
  run: a mean acceptance length, no counts (``drafts`` None, so not flagged from it) unless the
  server says it runs no speculative algorithm (then 0). ``drafted_evidence`` says whether the
  evidence shows drafting, whichever the source.
- neither: not measured (a server without spec-decode counters, or a page it could not read).

A candidate arm labelled speculative (a ``speculative_config``) whose evidence shows no draft
at all is flagged ``did_not_speculate``: it ran as the baseline did, and whatever it measured
says nothing about speculative decoding. The release gate refuses to pass on it.

One with no evidence either way is flagged ``no_evidence`` (the gate does not measure its
latency benefit); one whose drafts contradict its config (more than k tokens in a step, a
baseline that drafted: :mod:`.draft_checks` says what is and is not evidence) is flagged
``config_mismatch`` (the gate fails it). ``reason`` says why for whichever flag is set.

Pure pandas; no Django.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import pandas as pd

from console.analysis.acceptance import (
    SUMMED_ITERATIONS,
    server_acceptance,
    server_counters_sum,
    server_sampled_acceptance,
    server_totals_source,
)
from console.analysis.comparison.draft_checks import config_mismatch_reason, no_evidence_reason
from console.jsonutil import json_safe

PER_REQUEST = "per-request"
RUN_LEVEL = "run-level (server counters)"
RUN_LEVEL_ITERATIONS = "run-level (summed iteration statistics)"
RUN_LEVEL_SAMPLED = "run-level (sampled server gauges)"
NOT_SPECULATING = "server did not speculate"


def speculation_rows(
    *,
    request_steps: pd.DataFrame,
    derived: pd.DataFrame,
    runs: pd.DataFrame,
    base_arm: str,
    speculative_arms: Collection[str] | None,
    steps: pd.DataFrame | None = None,
    speculative_configs: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> list[dict[str, Any]]:
    """One row per arm x load: ``arm``, ``load``, ``is_baseline``, ``speculative`` (labelled so;
    None when the labels are unknown), ``source`` (``PER_REQUEST``, ``RUN_LEVEL``,
    ``RUN_LEVEL_ITERATIONS``, ``RUN_LEVEL_SAMPLED`` or None),
    ``drafts``, ``drafted``, ``accepted`` (tokens), ``acceptance_rate``,
    ``mean_acceptance_length``, ``rate_per_draft_by_position`` (list, position 1 first),
    ``server`` (the run-level totals when every run has them, else None),
    ``drafted_evidence`` (whether the evidence shows drafting; None: unknown),
    ``max_drafted_per_step`` (tokens; None without per-step lists), ``did_not_speculate``,
    ``no_evidence``, ``config_mismatch`` and ``reason``.

    ``request_steps`` is :func:`console.analysis.acceptance.steps_per_request` over ``derived``'s
    rows, ``steps`` the per-step frame it sums (``row``, ``drafted``); ``runs`` may carry
    ``spec_counters`` (each run's counter deltas, a dict or None); ``speculative_configs`` maps an
    arm to its ``speculative_config`` (vLLM's keys), for the draft-length check.
    """
    keys = derived[["arm", "load", "run_id"]].reset_index(drop=True)
    per_step = _per_step_extremes(steps, keys)
    steps = request_steps.assign(
        arm=keys["arm"].to_numpy()[request_steps["row"].to_numpy()],
        load=keys["load"].to_numpy()[request_steps["row"].to_numpy()],
    )
    counters = (
        dict(zip(runs["run_id"], runs["spec_counters"], strict=True)) if "spec_counters" in runs else {}
    )
    with_counters = {
        str(arm)
        for arm, group in keys.groupby("arm", sort=True)
        if server_counters_sum([counters.get(r) for r in group["run_id"].unique()]) is not None
    }
    out = []
    for (arm, load), group in keys.groupby(["arm", "load"], sort=True):
        mine = steps[(steps["arm"] == arm) & (steps["load"] == load)]
        run_ids = sorted(group["run_id"].unique())
        server = server_counters_sum([counters.get(r) for r in run_ids])
        sampled = server_sampled_acceptance([counters.get(r) for r in run_ids]) if server is None else None
        row: dict[str, Any] = {
            "arm": arm,
            "load": load,
            "is_baseline": arm == base_arm,
            "speculative": None if speculative_arms is None else arm in speculative_arms,
            "server": server_acceptance(server) if server is not None else None,
        }
        if len(mine):
            drafts, drafted, accepted = (int(mine[c].sum()) for c in ("n_drafts", "drafted", "accepted"))
            row |= {
                "source": PER_REQUEST,
                "drafts": drafts,
                "drafted": drafted,
                "accepted": accepted,
                "acceptance_rate": accepted / drafted if drafted else None,
                "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
                "rate_per_draft_by_position": None,  # in acceptance.by_position, with the conditional rate
            }
        elif server is not None:
            iterations = server_totals_source([counters.get(r) for r in run_ids]) == SUMMED_ITERATIONS
            row |= {"source": RUN_LEVEL_ITERATIONS if iterations else RUN_LEVEL} | server_acceptance(server)
        elif sampled is not None:
            row |= {"source": RUN_LEVEL_SAMPLED} | sampled
        else:
            row |= {"source": None, "drafts": None, "drafted": None, "accepted": None}
            row |= {"acceptance_rate": None, "mean_acceptance_length": None, "rate_per_draft_by_position": None}
        row.setdefault("drafted_evidence", None if row["drafts"] is None else row["drafts"] > 0)
        max_drafted, n_draft_steps = per_step.get((arm, load), (None, None))
        row["max_drafted_per_step"] = max_drafted if len(mine) else None
        positions = len(server["accepted_per_pos"]) if server else None  # type: ignore[arg-type]
        config = (speculative_configs or {}).get(arm)
        out.append(
            _flags(row, config=config, n_draft_steps=n_draft_steps, positions=positions, arms_with_counters=with_counters)
        )
    return json_safe(out)


def _per_step_extremes(steps: pd.DataFrame | None, keys: pd.DataFrame) -> dict[tuple[str, str], tuple[int, int]]:
    """Per arm x load: the most tokens one step drafted and the number of steps that drafted."""
    if steps is None or not len(steps):
        return {}
    rows = steps["row"].to_numpy()
    frame = pd.DataFrame(
        {"arm": keys["arm"].to_numpy()[rows], "load": keys["load"].to_numpy()[rows], "drafted": steps["drafted"].to_numpy()}
    )
    frame["drafting"] = frame["drafted"] > 0
    agg = frame.groupby(["arm", "load"], sort=False).agg(max_drafted=("drafted", "max"), n=("drafting", "sum"))
    return {(str(a), str(lo)): (int(m), int(n)) for (a, lo), m, n in zip(agg.index, agg["max_drafted"], agg["n"], strict=True)}


def _flags(
    row: dict[str, Any],
    *,
    config: Mapping[str, Any] | None,
    n_draft_steps: int | None,
    positions: int | None,
    arms_with_counters: Collection[str],
) -> dict[str, Any]:
    """``row`` with ``did_not_speculate``, ``no_evidence``, ``config_mismatch`` and the reason."""
    arm, load = row["arm"], row["load"]
    flagged = bool(row["speculative"]) and row["source"] is not None and row["drafts"] == 0
    missing = bool(row["speculative"]) and not row["is_baseline"] and row["source"] is None
    mismatch = config_mismatch_reason(
        arm=arm,
        load=load,
        config=config,
        speculative=row["speculative"],
        evidence={
            "source": row["source"],
            "drafts": row["drafts"],
            "drafted": row["drafted"],
            "max_drafted": row["max_drafted_per_step"],
            "n_draft_steps": n_draft_steps,
            "positions": positions or None,
        },
    )
    row["did_not_speculate"] = flagged
    row["no_evidence"] = missing
    row["config_mismatch"] = mismatch is not None
    if flagged:
        row["reason"] = (
            f"{NOT_SPECULATING}: {arm} is configured to speculate, yet its {row['source']} "
            f"evidence at load {load} shows no draft at all; it ran as the baseline did"
        )
    elif missing:
        row["reason"] = no_evidence_reason(arm=arm, load=load, arms_with_counters=arms_with_counters)
    else:
        row["reason"] = mismatch
    return row


def speculation_notes(rows: list[dict[str, Any]]) -> list[str]:
    """The comparison's notes from its speculation rows: every flagged row's reason."""
    flags = ("did_not_speculate", "no_evidence", "config_mismatch")
    return [str(row["reason"]) for row in rows if any(row.get(f) for f in flags) and row.get("reason")]
