"""The upload form: parses input only; the import itself is services.trace_import."""

from __future__ import annotations

from django import forms
from django.conf import settings

from console.accounts import teams
from console.accounts.models import Team
from console.accounts.roles import UPLOAD_TRACE
from console.traces.arrivals import ArrivalSpecError, arrival_spec_parse
from console.traces.errors import TraceImportError
from console.traces.parsers import FORMAT_CHOICES
from console.traces.parsers.mapped import (
    KEEP_FIELDS_MAX,
    PATH_MAX_CHARS,
    SYSTEM_PROMPT_MAX_CHARS,
    field_mapping_parse,
)
from console.traces.redaction import MAX_PATTERN_CHARS, MAX_PATTERNS, RedactionError, patterns_parse
from console.traces.selectors import pairing_pool_choices
from console.traces.sessions import ThinkTimeSpecError, think_time_spec_parse


def redaction_patterns_checked(value: str) -> str:
    """``value`` when the import's parser takes its ``NAME=REGEX`` lines, else a form error saying why
    (the upload form's own patterns, and a team's on the admin site)."""
    try:
        patterns_parse(value)
    except RedactionError as exc:
        raise forms.ValidationError(str(exc)) from None
    return value


class TraceUploadForm(forms.Form):
    field_order = ["file", "team", "name"]  # the rest in the order declared
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
    seed = forms.IntegerField(
        initial=0,
        min_value=0,
        max_value=2**63 - 1,
        help_text="Seeds the arrival process, the pairing and the split (0 to 2^63 - 1).",
    )
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

    # A prompt set in any layout: naming the prompt field selects the field-mapped format.
    prompt_field = forms.CharField(
        label="Prompt field",
        required=False,
        max_length=PATH_MAX_CHARS,
        help_text="For a prompt set no format above knows: the dotted path to the prompt text or to a list of chat "
        "messages [{role, content}], e.g. data.question. JSON, JSONL, CSV or Parquet, gzip or not.",
    )
    id_field = forms.CharField(
        label="Id field",
        required=False,
        max_length=PATH_MAX_CHARS,
        help_text="Dotted path to the request id.",
    )
    task_field = forms.CharField(
        label="Task field",
        required=False,
        max_length=PATH_MAX_CHARS,
        help_text="Dotted path to the task label.",
    )
    default_task = forms.CharField(
        label="Task",
        required=False,
        max_length=60,
        help_text="Task label for requests that carry none (code, chat, math, ...).",
    )
    system_prompt = forms.CharField(
        label="System prompt",
        required=False,
        max_length=SYSTEM_PROMPT_MAX_CHARS,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Put before each prompt as a system message.",
    )
    keep_fields = forms.CharField(
        label="Keep fields",
        required=False,
        max_length=KEEP_FIELDS_MAX * (PATH_MAX_CHARS + 1),
        help_text=f"Dotted paths kept in each request's metadata (answers, tests for graders); comma-separated, "
        f"at most {KEEP_FIELDS_MAX}.",
    )
    turns = forms.ChoiceField(
        label="Turns",
        required=False,
        choices=[("first", "first turn of each conversation"), ("all", "all turns, as sessions")],
        initial="first",
        help_text="For multi-turn prompt sets (ShareGPT, MT-Bench): replay later turns as sessions.",
    )
    think_time = forms.CharField(
        label="Think time",
        required=False,
        max_length=100,
        help_text="Before each later turn: const:SECONDS, exp:MEAN_SECONDS or none (seeded by the seed).",
    )
    redact = forms.BooleanField(
        label="Redact before storing",
        required=False,
        help_text="Replace e-mail addresses, phone and card numbers, keys and tokens, and IP addresses "
        "by typed placeholders ([EMAIL_1]) before anything is stored; the replay sends the redacted text.",
    )
    redact_patterns = forms.CharField(
        label="Your own patterns",
        required=False,
        max_length=MAX_PATTERNS * (MAX_PATTERN_CHARS + 40),
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="With redaction: one NAME=REGEX a line (EMPLOYEE=EMP-\\d{6}), replaced by [NAME_1].",
    )

    team = forms.ModelChoiceField(
        label="Team",
        queryset=Team.objects.none(),
        required=False,  # clean_team: the user's one team when they have one
        help_text="Who owns the trace and everything made from it; only its members see them.",
    )

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        own = teams.teams_where(user, UPLOAD_TRACE)
        self.fields["team"].queryset = own
        if len(own) == 1:
            self.fields["team"].initial = own[0]
        self.fields["pair_with"].choices = [
            ("", "none: the file has its own prompts")
        ] + pairing_pool_choices(user=user)
        self.fields["default_max_tokens"].max_value = settings.SPECREVIEW_MAX_TOKENS_CEILING

    def clean_team(self) -> Team:
        return teams.team_or_only_one(
            self.cleaned_data.get("team"), self.fields["team"], what="own the trace"
        )

    def clean_arrival(self) -> str:
        value = self.cleaned_data["arrival"].strip()
        if value:
            try:
                arrival_spec_parse(value)
            except ArrivalSpecError as exc:
                raise forms.ValidationError(str(exc)) from None
        return value

    def clean(self):
        data = super().clean()
        keep = [k for k in (data.get("keep_fields") or "").replace("\n", ",").split(",") if k.strip()]
        try:
            data["mapping"] = field_mapping_parse(
                prompt_field=data.get("prompt_field"),
                id_field=data.get("id_field"),
                task_field=data.get("task_field"),
                system_prompt=(data.get("system_prompt") or "").strip() and data.get("system_prompt"),
                keep_fields=keep,
            )
        except TraceImportError as exc:
            data["mapping"] = None
            fields = {"keep_field": "keep_fields"}
            for error in exc.errors:
                self.add_error(fields.get(error.field or "", error.field), error.message)
        if data.get("mapping") is not None and data.get("source_format"):
            self.add_error("source_format", "a prompt field maps the file itself: leave the format to detect")
        return data

    MAPPING_FIELDS = (
        "prompt_field",
        "id_field",
        "task_field",
        "default_task",
        "system_prompt",
        "keep_fields",
    )

    REDACTION_FIELDS = ("redact", "redact_patterns")

    def main_fields(self) -> list:
        """The fields every upload uses, shown first."""
        skip = self.MAPPING_FIELDS + self.REDACTION_FIELDS
        return [self[name] for name in self.fields if name not in skip]

    def redaction_fields(self) -> list:
        return [self[name] for name in self.REDACTION_FIELDS]

    def clean_redact_patterns(self) -> str:
        return redaction_patterns_checked(self.cleaned_data["redact_patterns"])

    def mapping_fields(self) -> list:
        """The field mapping for prompt sets in any layout, shown together."""
        return [self[name] for name in self.MAPPING_FIELDS]

    def clean_think_time(self) -> str:
        value = self.cleaned_data["think_time"].strip()
        if value:
            try:
                think_time_spec_parse(value)
            except ThinkTimeSpecError as exc:
                raise forms.ValidationError(str(exc)) from None
        return value
