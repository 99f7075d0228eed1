from __future__ import annotations

import json

from django import forms

from console.traces.models import Trace

EXAMPLE_CANDIDATES = [
    {"speculative_config": {"method": "ngram", "num_speculative_tokens": [2, 4, 8], "prompt_lookup_max": 3}},
    {
        "speculative_config": {
            "method": "draft_model",
            "model": "qwen2.5-coder-0.5b",
            "num_speculative_tokens": 4,
        }
    },
]


class JSONField(forms.CharField):
    widget = forms.Textarea

    def to_python(self, value):
        value = super().to_python(value)
        if value in ("", None):
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None

    def prepare_value(self, value):
        if isinstance(value, dict | list):
            return json.dumps(value, indent=2)
        return value


class ExperimentForm(forms.Form):
    name = forms.CharField(max_length=200)
    trace = forms.ModelChoiceField(queryset=Trace.objects.all())
    split = forms.ChoiceField(
        choices=[("all", "all requests"), ("train", "train split"), ("holdout", "holdout split")],
        initial="all",
    )
    engine = forms.ChoiceField(
        choices=[
            ("hf", "hf: transformers (CPU default)"),
            ("vllm", "vllm"),
            ("openai", "openai-compatible server"),
        ]
    )
    target_model = forms.CharField(max_length=500, initial="qwen2.5-coder-1.5b")
    hardware_label = forms.CharField(max_length=200, required=False)
    baseline_engine_args = JSONField(
        required=False, initial={}, help_text="engine arguments shared by every arm"
    )
    candidates = JSONField(
        initial=EXAMPLE_CANDIDATES,
        help_text="speculative candidates (vLLM keys); a list for num_speculative_tokens makes a sweep",
    )
    load_levels = forms.CharField(
        initial="1x,2x", help_text="rate multipliers, optional caps: 0.5x,1x,2x/c4,c8"
    )
    output_limit = forms.IntegerField(required=False, min_value=1, help_text="cap on max_tokens (tokens)")
    deadlines = JSONField(
        required=False,
        initial={"interactive": {"e2e_s": 10, "ttft_s": 1}, "batch": {"e2e_s": 120}},
        help_text="seconds, per traffic class",
    )
    sampling = forms.ChoiceField(choices=[("trace", "keep each request's"), ("greedy", "force greedy")])
    repeats = forms.IntegerField(min_value=1, initial=3)
    warmup = forms.IntegerField(min_value=0, initial=1)
    cost_per_hour_usd = forms.FloatField(min_value=0, initial=2.0, label="Cost per accelerator-hour (USD)")
    power_price_usd_per_kwh = forms.FloatField(min_value=0, required=False, label="Power price (USD/kWh)")
    start_now = forms.BooleanField(required=False, initial=True)

    def clean_candidates(self):
        value = self.cleaned_data["candidates"]
        if isinstance(value, dict):
            value = [value]
        if not isinstance(value, list):
            raise forms.ValidationError("a JSON list of candidates")
        return value

    def add_service_errors(self, errors: dict[str, list[str]]) -> None:
        for key, messages in errors.items():
            field, _, index = key.partition(".")
            target = field if field in self.fields else None
            if field == "baseline":
                target = "baseline_engine_args"
            for message in messages:
                self.add_error(target, f"candidate {int(index) + 1}: {message}" if index else message)
