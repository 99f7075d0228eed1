from __future__ import annotations

import json

from django import forms
from django.utils.html import format_html

from console.accounts import teams
from console.accounts.roles import RUN_EXPERIMENT
from console.jsonutil import strict_loads
from console.traces.models import TRAFFIC_CLASSES, Trace

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
            return strict_loads(value)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
        except ValueError as exc:  # NaN, Infinity, 1e999
            raise forms.ValidationError(f"not valid JSON: {exc}") from None

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
        # format_html escapes its arguments: the keys and examples are constants, shown as code to type
        help_text=format_html(
            "speculative candidates (vLLM keys); a list for <code>{}</code> makes a sweep", "num_speculative_tokens"
        ),
    )
    load_levels = forms.CharField(
        initial="1x,2x",
        help_text=format_html(
            "rate multipliers, optional caps: <code>{}</code>; optional workload weights on every level "
            "(gate criterion 1): <code>{}</code>",
            "0.5x,1x,2x/c4,c8",
            "1x=3,4x=1",
        ),
    )
    output_limit = forms.IntegerField(
        required=False, min_value=1, help_text=format_html("cap on <code>{}</code> (tokens)", "max_tokens")
    )
    output_buckets = forms.CharField(
        required=False,
        max_length=500,
        label="Output-length buckets",
        help_text=format_html(
            "optional matrix axis, <code>{}</code> per bucket by recorded output length (tokens), e.g. "
            "<code>{}</code> (the last bucket has no upper edge); empty = every request in each run",
            "edge:limit",
            "0:64,64:256,256:1024",
        ),
    )
    deadlines = JSONField(
        required=False,
        initial={"interactive": {"e2e_s": 10, "ttft_s": 1}, "batch": {"e2e_s": 120}},
        help_text="seconds, per traffic class",
    )
    sampling = forms.ChoiceField(choices=[("trace", "keep each request's"), ("greedy", "force greedy")])
    repeats = forms.IntegerField(
        min_value=1,
        initial=3,
        help_text="with run until decided: the first batch; more are added one at a time until decided",
    )
    warmup = forms.IntegerField(min_value=0, initial=1)
    cost_per_hour_usd = forms.FloatField(min_value=0, initial=2.0, label="Cost per accelerator-hour (USD)")
    power_price_usd_per_kwh = forms.FloatField(min_value=0, required=False, label="Power price (USD/kWh)")
    promised_class = forms.ChoiceField(
        choices=[(c, c) for c in TRAFFIC_CLASSES],
        initial="interactive",
        required=False,
        label="Promised class",
        help_text="declared before the run: the traffic class the release promises a latency benefit to",
    )
    primary_metric = forms.ChoiceField(
        choices=[
            ("tpot_s:p95", "p95 TPOT"),
            ("tpot_s:p50", "p50 TPOT"),
            ("e2e_s:p95", "p95 end-to-end"),
            ("e2e_s:p99", "p99 end-to-end"),
            ("ttft_s:p95", "p95 TTFT"),
            ("itl_chunk_mean_s:p95", "p95 inter-chunk gap"),
        ],
        initial="tpot_s:p95",
        required=False,
        label="Primary latency metric",
        help_text="the gate judges this one (Holm-corrected over arms and loads); every other cell is exploratory",
    )
    success_metric = forms.ChoiceField(
        choices=[("success", "success (finished, within deadline, valid)"), ("met_deadline", "within deadline")],
        initial="success",
        required=False,
        label="Success metric",
    )
    scheduling = forms.ChoiceField(
        choices=[
            ("parallel", "parallel: every run released at once"),
            ("lockstep", "lockstep: one run at a time, in matrix order (many workers)"),
        ],
        initial="parallel",
        required=False,  # a form without it (an older client) keeps today's behaviour
        label="Scheduling",
        help_text="with several workers on the queue, lockstep keeps the arms interleaved in time",
    )
    capacity_search = forms.BooleanField(
        required=False,
        label="Capacity search",
        help_text="per arm and repeat, bisect the arrival rate for the highest multiplier that meets the SLO "
        "(more runs, added one by one; docs/capacity.md)",
    )
    capacity_slo = JSONField(
        required=False,
        initial={"attainment": 0.99},
        label="Capacity SLO",
        help_text=format_html(
            "<code>{}</code> (default: the promised class), <code>{}</code> (fraction within deadline), "
            "<code>{}</code>, <code>{}</code> (seconds); at least one bound",
            "traffic_class",
            "attainment",
            "p95_tpot_s",
            "p95_e2e_s",
        ),
    )
    capacity_lo = forms.FloatField(required=False, initial=0.25, label="Capacity bracket low (x trace rate)")
    capacity_hi = forms.FloatField(required=False, initial=16.0, label="Capacity bracket high (x trace rate)")
    capacity_steps = forms.IntegerField(required=False, initial=5, label="Capacity steps per search (1-8)")
    until_decided = forms.BooleanField(
        required=False,
        label="Run until decided",
        help_text="after the first batch of repeats, add one repeat at a time until the primary endpoint is "
        "better, worse or equivalent at every candidate and load (each look's interval adjusted for the "
        "looks), or the budget is spent (docs/statistics.md)",
    )
    until_max_repeats = forms.IntegerField(
        required=False, min_value=1, max_value=50, initial=8, label="Until decided: most repeats (first batch included)"
    )
    until_margin_s = forms.FloatField(
        required=False,
        min_value=0,
        label="Until decided: equivalence margin (s)",
        help_text="in the primary endpoint's unit (seconds); empty or 0: no equivalence decision",
    )
    until_max_runs = forms.IntegerField(required=False, min_value=1, label="Until decided: run budget")
    until_max_accelerator_hours = forms.FloatField(
        required=False, label="Until decided: accelerator-hour budget", help_text="busy wall time x accelerators"
    )
    start_now = forms.BooleanField(required=False, initial=True)

    CAPACITY_FIELDS = ("capacity_search", "capacity_slo", "capacity_lo", "capacity_hi", "capacity_steps")
    UNTIL_FIELDS = (
        "until_decided",
        "until_max_repeats",
        "until_margin_s",
        "until_max_runs",
        "until_max_accelerator_hours",
    )

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        # Only traces of teams where the user may run experiments: another team's trace id is
        # "not one of the available choices", whatever is posted.
        owned = Trace.objects.filter(team_id__in=teams.team_ids(user, capability=RUN_EXPERIMENT))
        self.fields["trace"].queryset = owned.order_by("-created_at")

    def until_decided_value(self) -> dict | None:
        """The ``until_decided`` option from the cleaned form (the service validates it)."""
        data = self.cleaned_data
        if not data.get("until_decided"):
            return None
        out: dict = {"max_repeats": data.get("until_max_repeats")}
        for key in ("margin_s", "max_runs", "max_accelerator_hours"):
            if data.get(f"until_{key}") is not None:
                out[key] = data[f"until_{key}"]
        return out

    def clean(self):
        data = super().clean()
        if data.get("until_decided") and not self.errors.get("primary_metric") and not data.get("primary_metric"):
            self.add_error("primary_metric", "run until decided decides on the primary endpoint: declare one")
        if data.get("until_decided") and data.get("until_max_repeats") is None and "until_max_repeats" not in self.errors:
            self.add_error("until_max_repeats", "run until decided needs the most repeats it may run")
        return data

    def capacity_search_value(self) -> dict | None:
        """The ``capacity_search`` option from the cleaned form (the service validates it)."""
        data = self.cleaned_data
        if not data.get("capacity_search"):
            return None
        out: dict = {"slo": data.get("capacity_slo")}
        for key in ("lo", "hi", "steps"):
            if data.get(f"capacity_{key}") is not None:
                out[key] = data[f"capacity_{key}"]
        return out

    def endpoints(self) -> dict:
        """The declared endpoints from the cleaned form."""
        metric, _, stat = (self.cleaned_data.get("primary_metric") or "tpot_s:p95").partition(":")
        return {
            "promised_class": self.cleaned_data.get("promised_class") or "interactive",
            "primary_metric": metric,
            "primary_stat": stat,
            "success_metric": self.cleaned_data.get("success_metric") or "success",
            "success_stat": "mean",
        }

    def clean_scheduling(self) -> str:
        return self.cleaned_data.get("scheduling") or "parallel"

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
            if field == "endpoints":
                target = "primary_metric"
            if field == "capacity_search":
                target = "capacity_slo"
            for message in messages:
                where = _until_target(message) if field == "until_decided" else target
                self.add_error(where, f"candidate {int(index) + 1}: {message}" if index else message)


def _until_target(message: str) -> str:
    """The form field an ``until_decided`` service error belongs to (``until_decided.max_runs: ...``
    goes beside the run budget)."""
    key = message.partition(":")[0].partition(".")[2]
    return f"until_{key}" if key in ("max_repeats", "margin_s", "max_runs", "max_accelerator_hours") else "until_decided"
