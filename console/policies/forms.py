"""The fit form: which experiment, candidates, load level, metric, features and support."""

from __future__ import annotations

from typing import Any

from django import forms

from console.experiments.models import Experiment
from console.policies import features as policy_features
from console.policies import pairs as policy_pairs
from console.policies import words as policy_words
from console.policies.selectors import experiment_fit_choices

ALL_LOADS = "__all__"


class PolicyFitForm(forms.Form):
    experiment = forms.ModelChoiceField(queryset=Experiment.objects.all(), widget=forms.HiddenInput)
    arms = forms.MultipleChoiceField(
        choices=[],
        widget=forms.CheckboxSelectMultiple,
        help_text="candidates to choose among per slice; tick a whole draft-length sweep to pick k per slice",
    )
    load = forms.ChoiceField(choices=[], help_text="fit at one load level, or pool every level")
    metric = forms.ChoiceField(choices=[(k, v[2]) for k, v in policy_pairs.METRICS.items()], initial="tpot_s")
    features = forms.MultipleChoiceField(
        choices=[(k, policy_words.feature_choice_text(k)) for k in policy_features.ALLOWED_FEATURES],
        initial=list(policy_features.DEFAULT_FEATURES),
        widget=forms.CheckboxSelectMultiple,
        help_text="only features known before the request runs are offered",
    )
    min_support = forms.IntegerField(min_value=2, initial=10, help_text="train requests a slice needs")
    ci = forms.FloatField(min_value=0.5, max_value=0.999, initial=0.95, label="Interval level")

    def __init__(self, *args: Any, experiment: Experiment, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.choices = experiment_fit_choices(experiment=experiment)
        self.fields["experiment"].initial = experiment.pk
        # the one experiment the view found among the user's teams', whatever else is posted
        self.fields["experiment"].queryset = Experiment.objects.filter(pk=experiment.pk)  # type: ignore[attr-defined]
        arms_field: forms.MultipleChoiceField = self.fields["arms"]  # type: ignore[assignment]
        load_field: forms.ChoiceField = self.fields["load"]  # type: ignore[assignment]
        arms_field.choices = [(a, a) for a in self.choices["candidates"]]
        self.fields["arms"].initial = list(self.choices["candidates"])
        load_field.choices = [(ALL_LOADS, "all loads pooled")] + [(lv, lv) for lv in self.choices["loads"]]
        if self.choices["loads"]:
            self.fields["load"].initial = self.choices["loads"][0]

    def service_kwargs(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "experiment": data["experiment"],
            "arms": list(data["arms"]),
            "load": None if data["load"] == ALL_LOADS else data["load"],
            "metric": data["metric"],
            "features": list(data["features"]),
            "min_support": data["min_support"],
            "ci": data["ci"],
        }
