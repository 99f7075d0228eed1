"""The release gate: five criteria computed from the comparison, never typed in.

Pure functions; no Django. The facts are read from the typed comparison
(``console.analysis.comparison.schema.Summary``), then every criterion reads plain facts and
returns ``{"key", "title", "status" ("pass" | "fail" | "not_measured"), "summary", "numbers", "evidence",
"notes"}``; ``numbers`` is a list of ``{"label", "value", "unit"}`` rows (the figures behind the
verdict), ``evidence`` a list of ``{"label", "anchor"}`` (a section of the comparison page).

One module per criterion (``task_improvement``, ``latency``, ``quality``, ``memory``,
``stability``, ``policy_holdout``); ``facts`` is the one reader of the comparison summary,
``settings`` checks and resolves the per-decision settings, ``constants`` and ``common`` hold
what the criteria share, and ``evaluate`` runs the criteria and gives the overall verdict. This
package re-exports the names the rest of the console imports.

Pass only on evidence
---------------------
A criterion is ``not_measured`` whenever its inputs are missing: no noise floor (one baseline
repeat), a load in scope without data, too few requests of the promised class for the declared
statistic, no applicable quality check, a single load level for the stability criterion, a
baseline whose repeats disagree. ``not_measured`` never becomes ``pass``: the overall verdict is
``pass`` only when every criterion passes, and approving anything else needs an override reason.

Facts (the gate's only input besides its settings)
--------------------------------------------------
``gate_facts_from_summary`` is the one place that reads the comparison (the typed ``Summary`` of
``console.analysis.comparison.schema``, version 2); every criterion reads only these facts, the
gate's own JSON, stored with its result and re-evaluated without the comparison:

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
  (complete counts, never a truncated list). Graded correctness (the comparison's ``correctness``,
  check ``"correct"``: baseline right, candidate wrong) joins these checks.
- ``headline`` (point estimates frozen into the evidence), ``acceptance_rate_min`` (the
  candidate's lowest acceptance rate over its loads), ``acceptance_rate_lo_min`` (the lowest
  lower bound of its 95% acceptance intervals; None where none was measured), ``memory``,
  ``stats_reported``, ``acceptance_by_task`` (read by the checklist).
- ``not_speculating``: the comparison's reasons, one per load, why the candidate (configured to
  speculate) drafted nothing at all (the summary's ``speculation`` rows flagged
  ``did_not_speculate``). The gate refuses to pass on such a candidate: its latency criterion
  (or, for a slice policy, its holdout criterion) fails with that reason.
- ``no_speculation_evidence``: ``[{"load", "reason"}]``, the loads where the candidate, configured
  to speculate, left no acceptance evidence at all (the speculation rows' ``no_evidence``, or
  ``source`` None): criterion 2 (or the holdout criterion) is not measured at a load in scope.
- ``config_mismatch``: reasons the candidate's or the baseline's drafts contradict its config
  (``config_mismatch`` rows); ``environment_mismatch``: reasons the two arms' runs differ in
  hardware, driver or versions (the comparison's ``environment`` section);
  ``environment_checked``: whether any run recorded its environment. Either mismatch fails
  criterion 2 (or the holdout criterion) like ``not_speculating``.

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

from console.decisions.gate.constants import CRITERIA, DEFAULT_SETTINGS
from console.decisions.gate.evaluate import gate_evaluate, gate_not_passing
from console.decisions.gate.facts import (
    gate_facts_from_summary,
    gate_facts_keep_off,
    memory_capacity_from_hardware,
)
from console.decisions.gate.policy_holdout import criterion_policy_holdout
from console.decisions.gate.quality import criterion_quality
from console.decisions.gate.sequential import gate_sequential_attach
from console.decisions.gate.settings import GateSettingsError, gate_settings_resolve, gate_settings_validate

__all__ = [
    "CRITERIA",
    "DEFAULT_SETTINGS",
    "GateSettingsError",
    "criterion_policy_holdout",
    "criterion_quality",
    "gate_evaluate",
    "gate_facts_from_summary",
    "gate_facts_keep_off",
    "gate_not_passing",
    "gate_sequential_attach",
    "gate_settings_resolve",
    "gate_settings_validate",
    "memory_capacity_from_hardware",
]
