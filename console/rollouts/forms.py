"""The start form: a registered Prometheus, the two pools' label matchers, the stages typed as
``share:minutes, ...`` and the false-alarm rate. The services check every value again."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings

from console.rollouts.selectors import stages_parse
from console.rollouts.services import RolloutError, stages_check


class RolloutStartForm(forms.Form):
    prometheus = forms.ChoiceField(choices=())
    candidate_pool = forms.CharField(max_length=500, initial='pool="speculative"',
                                     help_text="label matchers of the candidate's pods")
    control_pool = forms.CharField(max_length=500, initial='pool="baseline"',
                                   help_text="label matchers of the control's pods")
    stages = forms.CharField(max_length=400, initial="5:30, 25:60, 50:60, 100:120",
                             help_text="share of traffic (%) : minutes, for each stage")
    alpha = forms.FloatField(label="False-alarm rate (alpha)", min_value=0.0001, max_value=0.2, initial=0.05,
                             help_text="each trigger's false-alarm rate over the whole rollout")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = sorted(settings.SPECREVIEW_PROMETHEUS)
        self.fields["prometheus"].choices = [(n, n) for n in names]  # type: ignore[attr-defined]

    def clean_stages(self) -> list[dict[str, Any]]:
        try:
            return stages_check(stages_parse(self.cleaned_data["stages"]))
        except (ValueError, RolloutError) as exc:
            raise forms.ValidationError(str(exc)) from None


class RolloutActForm(forms.Form):
    ACTS = ("pause", "resume", "stop", "rolled_back")
    act = forms.ChoiceField(choices=[(a, a) for a in ACTS])
    reason = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}))
