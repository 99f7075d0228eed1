"""Forms parse input; services decide. Rollback triggers are typed one per line as
``decisions.triggers.LINE_FORMAT``."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.conf import settings as django_settings

from console import numbers
from console.accounts import teams
from console.accounts.roles import DRAFT_DECISION
from console.decisions import checklist as checklist_mod
from console.decisions import gate
from console.decisions.limits import APPROVALS_MAX, APPROVALS_MIN, NOTE_MAX_CHARS, TEXT_MAX_CHARS
from console.decisions.models import Decision
from console.decisions.triggers import TriggerError, triggers_text, triggers_text_parse
from console.experiments.models import Arm, Experiment
from console.exports import site_path_problem
from console.jsonutil import strict_loads
from console.policies.models import SlicePolicy
from console.policies.words import metric_text as policy_metric_text
from console.traces.models import TRAFFIC_CLASSES


def _policy_ref_clean(value: str) -> str:
    problem = site_path_problem(value)
    if problem:
        raise forms.ValidationError(problem)
    return value.strip()


class PolicyChoiceField(forms.ModelChoiceField):
    """A slice policy by its number, experiment and metric in words ("policy 3 on experiment 1, TPOT mean")."""

    def label_from_instance(self, obj: SlicePolicy) -> str:
        return f"policy {obj.pk} on experiment {obj.experiment_id}, {policy_metric_text(obj.metric)}"


def approvals_field() -> forms.IntegerField:
    """A decision's own number of approvers (empty: the deployment's, as it is when submitted)."""
    return forms.IntegerField(
        min_value=APPROVALS_MIN,
        max_value=APPROVALS_MAX,
        required=False,
        label="Approvals required",
        help_text=f"distinct approvers who must sign, none of them a drafter, editor or submitter; empty: "
        f"this installation's {django_settings.SPECREVIEW_APPROVALS_REQUIRED} (fixed when submitted)",
    )


class DecisionCreateForm(forms.Form):
    experiment = forms.ModelChoiceField(queryset=Experiment.objects.all())
    title = forms.CharField(max_length=200, required=False)
    # No proposal is preselected: enabling speculation everywhere is a choice, never a default.
    proposal = forms.ChoiceField(choices=[("", "Choose a proposal"), *Decision.Proposal.choices])
    candidate_arm = forms.ModelChoiceField(queryset=Arm.objects.filter(is_baseline=False), required=False)
    traffic_class = forms.ChoiceField(choices=[(c, c) for c in TRAFFIC_CLASSES])
    rationale = forms.CharField(widget=forms.Textarea, required=False, max_length=TEXT_MAX_CHARS)
    slice_policy = PolicyChoiceField(
        queryset=SlicePolicy.objects.all(),
        required=False,
        help_text="to enable for a slice: a policy fitted on this experiment's train split (frozen into the evidence)",
    )
    policy_ref = forms.CharField(
        max_length=500,
        required=False,
        label="Policy (link or name)",
        help_text="a path on this site (/policies/12/) or a name",
    )
    supersedes = forms.ModelChoiceField(
        queryset=Decision.objects.filter(status__in=Decision.SIGNED_STATUSES), required=False
    )
    approvals_required = approvals_field()

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["approvals_required"] = approvals_field()  # the help names the setting as it is now
        # Only what the user's teams own, drafted where they may draft: another team's id is "not
        # one of the available choices", and its objects are never listed.
        drafting = teams.team_ids(user, capability=DRAFT_DECISION)
        self.fields["experiment"].queryset = Experiment.objects.filter(trace__team_id__in=drafting)
        self.fields["candidate_arm"].queryset = Arm.objects.filter(
            is_baseline=False, experiment__trace__team_id__in=drafting
        )
        self.fields["slice_policy"].queryset = SlicePolicy.objects.filter(experiment__trace__team_id__in=drafting)
        self.fields["supersedes"].queryset = Decision.objects.filter(
            status__in=Decision.SIGNED_STATUSES, experiment__trace__team_id__in=drafting
        )

    def clean_policy_ref(self) -> str:
        return _policy_ref_clean(self.cleaned_data.get("policy_ref") or "")

    def clean(self):
        data = super().clean()
        arm, experiment = data.get("candidate_arm"), data.get("experiment")
        superseded = data.get("supersedes")
        if superseded is not None and experiment is not None:
            if superseded.experiment.trace.team_id != experiment.trace.team_id:
                self.add_error("supersedes", "a decision supersedes only its own team's decisions")
        if arm is not None and experiment is not None and arm.experiment_id != experiment.pk:
            self.add_error("candidate_arm", "this arm belongs to another experiment")
        policy = data.get("slice_policy")
        if policy is not None and experiment is not None and policy.experiment_id != experiment.pk:
            self.add_error("slice_policy", "this policy was fitted on another experiment")
        return data


class DecisionEditForm(forms.Form):
    """Everything an engineer types on a draft; the gate is not among it."""

    title = forms.CharField(max_length=200)
    proposal = forms.ChoiceField(choices=Decision.Proposal.choices)
    candidate_arm = forms.ModelChoiceField(queryset=Arm.objects.none(), required=False)
    traffic_class = forms.ChoiceField(choices=[(c, c) for c in TRAFFIC_CLASSES])
    rationale = forms.CharField(widget=forms.Textarea, required=False, max_length=TEXT_MAX_CHARS)
    policy_ref = forms.CharField(
        max_length=500, required=False, help_text="a path on this site (/policies/12/) or a name"
    )
    policy = forms.CharField(widget=forms.Textarea, required=False, help_text="the slice policy as JSON")
    loads_in_scope = forms.CharField(
        required=False, help_text="comma-separated load labels the proposal covers (empty: all)"
    )
    memory_fraction = forms.FloatField(min_value=0.01, max_value=1.0, required=False)
    memory_capacity_gib = forms.FloatField(min_value=0, required=False, label="Memory capacity (GiB)")
    rollback_triggers = forms.CharField(widget=forms.Textarea, required=False)
    rollback_steps = forms.CharField(widget=forms.Textarea, required=False, max_length=TEXT_MAX_CHARS)
    rollback_owner = forms.CharField(max_length=200, required=False)
    rollback_verification = forms.CharField(widget=forms.Textarea, required=False, max_length=TEXT_MAX_CHARS)
    approvals_required = approvals_field()

    def __init__(self, *args: Any, decision: Decision, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["approvals_required"] = approvals_field()  # the help names the setting as it is now
        self.decision = decision
        self.fields["candidate_arm"].queryset = decision.experiment.arms.filter(is_baseline=False)  # type: ignore[attr-defined]
        measured = ((decision.gate or {}).get("facts") or {}).get("memory") or {}
        if measured.get("capacity_bytes"):
            self.fields[
                "memory_capacity_gib"
            ].help_text = (
                f"empty: the measured {numbers.size(measured['capacity_bytes'])} from the run hardware"
            )
        for item in decision.checklist or []:
            key = item["key"]
            if item.get("section") == checklist_mod.FIT_SECTION:
                continue  # evidence to read, not a question: nothing to answer or note
            if item["source"] == "engineer":
                self.fields[f"check_{key}"] = forms.ChoiceField(
                    label=item["question"],
                    choices=[("", "—"), ("yes", "yes"), ("no", "no")],
                    required=False,
                    help_text=item.get("detail", ""),
                )
            self.fields[f"note_{key}"] = forms.CharField(
                required=False, max_length=NOTE_MAX_CHARS, label=f"Note: {item['question']}"
            )

    @staticmethod
    def initial_for(decision: Decision) -> dict[str, Any]:
        gs = decision.gate_settings or {}
        resolved = gate.gate_settings_resolve(gs)
        capacity = gs.get("memory_capacity_bytes")
        initial: dict[str, Any] = {
            "title": decision.title,
            "proposal": decision.proposal,
            "candidate_arm": decision.candidate_arm_id,
            "traffic_class": decision.traffic_class,
            "rationale": decision.rationale,
            "policy_ref": decision.policy_ref,
            "policy": json.dumps(decision.policy, indent=2) if decision.policy else "",
            "loads_in_scope": ", ".join(gs.get("loads_in_scope") or []),
            "memory_fraction": resolved["memory_fraction"],
            "memory_capacity_gib": capacity / 2**30 if capacity else None,
            "rollback_triggers": triggers_text(decision.rollback_triggers),
            "rollback_steps": decision.rollback_steps,
            "rollback_owner": decision.rollback_owner,
            "rollback_verification": decision.rollback_verification,
            "approvals_required": decision.approvals_required,
        }
        for key, given in (decision.checklist_answers or {}).items():
            initial[f"check_{key}"] = given.get("answer") or ""
            initial[f"note_{key}"] = given.get("note") or ""
        return initial

    def clean_policy_ref(self) -> str:
        return _policy_ref_clean(self.cleaned_data.get("policy_ref") or "")

    def clean_rollback_triggers(self):
        try:
            return triggers_text_parse(self.cleaned_data.get("rollback_triggers") or "")
        except TriggerError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_loads_in_scope(self):
        labels = [s.strip() for s in (self.cleaned_data.get("loads_in_scope") or "").split(",") if s.strip()]
        known = [lv.get("label") for lv in self.decision.experiment.load_levels or []]
        unknown = [label for label in labels if label not in known]
        if unknown:
            raise forms.ValidationError(
                f"unknown load level {', '.join(unknown)}; the experiment has {', '.join(map(str, known))}"
            )
        return labels

    def clean_policy(self):
        text = (self.cleaned_data.get("policy") or "").strip()
        if not text:
            return None
        try:
            return strict_loads(text)
        except ValueError as exc:  # JSONDecodeError, NaN, Infinity, 1e999
            raise forms.ValidationError(f"not valid JSON: {exc}") from None

    def changes(self) -> dict[str, Any]:
        """The service's ``changes`` for the cleaned form."""
        data = self.cleaned_data
        settings = {k: v for k, v in (self.decision.gate_settings or {}).items() if k in gate.DEFAULT_SETTINGS}
        settings["loads_in_scope"] = data.get("loads_in_scope") or []
        if data.get("memory_fraction") is not None:
            settings["memory_fraction"] = data["memory_fraction"]
        capacity = data.get("memory_capacity_gib")
        settings["memory_capacity_bytes"] = int(capacity * 2**30) if capacity else None
        answers = {}
        for key, _ in checklist_mod.QUESTIONS:
            entry = {"note": data.get(f"note_{key}") or ""}
            if data.get(f"check_{key}"):
                entry["answer"] = data[f"check_{key}"]
            if entry["note"] or entry.get("answer"):
                answers[key] = entry
        return {
            "title": data["title"],
            "proposal": data["proposal"],
            "candidate_arm": data.get("candidate_arm"),
            "traffic_class": data["traffic_class"],
            "rationale": data.get("rationale") or "",
            "policy_ref": data.get("policy_ref") or "",
            "policy": data.get("policy"),
            "gate_settings": settings,
            "checklist_answers": answers,
            "rollback_triggers": data["rollback_triggers"],
            "rollback_steps": data.get("rollback_steps") or "",
            "rollback_owner": data.get("rollback_owner") or "",
            "rollback_verification": data.get("rollback_verification") or "",
            "approvals_required": data.get("approvals_required"),
        }


class SignOffForm(forms.Form):
    verdict = forms.ChoiceField(
        choices=[
            (Decision.Status.APPROVED, "Approve"),
            (Decision.Status.APPROVED_WITH_CONDITIONS, "Approve with conditions"),
            (Decision.Status.REJECTED, "Reject"),
        ]
    )
    comment = forms.CharField(widget=forms.Textarea, max_length=TEXT_MAX_CHARS)
    conditions = forms.CharField(widget=forms.Textarea, required=False, max_length=TEXT_MAX_CHARS)
    override_reason = forms.CharField(widget=forms.Textarea, required=False, max_length=TEXT_MAX_CHARS)


class ArchiveFilterForm(forms.Form):
    model = forms.CharField(required=False)
    status = forms.ChoiceField(
        required=False,
        choices=[("", "any")]
        + [(s, s.replace("_", " ")) for s in Decision.SIGNED_STATUSES]
        + [("superseded", "superseded")],
    )
    date_from = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    date_to = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
