"""The upload form: parses input only; the import itself is services.trace_import."""

from __future__ import annotations

from django import forms
from django.conf import settings

from console.traces.arrivals import ArrivalSpecError, arrival_spec_parse
from console.traces.parsers import FORMAT_CHOICES
from console.traces.selectors import pairing_pool_choices


class TraceUploadForm(forms.Form):
    file = forms.FileField(help_text="JSONL, JSON or CSV; docs/trace-format.md lists every accepted format.")
    name = forms.CharField(max_length=200, required=False, help_text="Defaults to the file name.")
    source_format = forms.ChoiceField(
        label="Format", required=False, choices=[("", "detect automatically")] + FORMAT_CHOICES
    )
    holdout_fraction = forms.FloatField(
        label="Holdout fraction",
        min_value=0.0,
        max_value=1.0,
        initial=0.3,
        help_text="Share of requests kept out of policy fitting (train/holdout by a stable hash of the id).",
    )
    seed = forms.IntegerField(initial=0, help_text="Seeds the arrival process, the pairing and the split.")
    arrival = forms.CharField(
        label="Arrival process",
        required=False,
        max_length=500,
        help_text="For prompt sets: constant:RATE, poisson:RATE, gamma:RATE:CV (requests/s) or borrow:TRACE_ID. "
        "Leave empty to keep the file's own timing.",
    )
    pair_with = forms.ChoiceField(
        label="Pairing pool",
        required=False,
        help_text="For timing-only traces (Mooncake, Azure, BurstGPT): where the prompts come from.",
    )
    default_max_tokens = forms.IntegerField(
        label="Default max_tokens",
        min_value=1,
        initial=256,
        help_text="For prompt sets, which carry no output length.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["pair_with"].choices = [
            ("", "none: the file has its own prompts")
        ] + pairing_pool_choices()
        self.fields["default_max_tokens"].max_value = settings.SPECREVIEW_MAX_TOKENS_CEILING

    def clean_arrival(self) -> str:
        value = self.cleaned_data["arrival"].strip()
        if value:
            try:
                arrival_spec_parse(value)
            except ArrivalSpecError as exc:
                raise forms.ValidationError(str(exc)) from None
        return value
