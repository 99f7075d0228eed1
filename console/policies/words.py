"""A slice policy in words, for its pages and for the decision form that names one: the metric it
optimises, the features it may use, a rule's slice ("prompt length (tokens) = 0-256, has a JSON
schema = no") and a benefit with its interval in signed milliseconds; never a feature's internal
key or a Python repr (console.words, console.numbers)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from console import numbers
from console.policies.alternatives import ALL_OFF, ALL_ON
from console.policies.features import ALLOWED_FEATURES
from console.policies.pairs import METRICS
from console.policies.requests_needed import slice_requests_needed
from console.words import DIMENSION_LABELS, key_words, metric_words, plain_value

# What each feature is, in words (features.ALLOWED_FEATURES says it with the keys of a request).
FEATURE_HELP: dict[str, str] = {
    "task": "the task type the trace gives each request",
    "traffic_class": "interactive or batch",
    "prompt_tokens_bucket": "the prompt's length in tokens, bucketed",
    "max_tokens_bucket": "the request's output limit in tokens, bucketed",
    "has_schema": "whether the request asks for a response format (JSON or a schema)",
    "has_tools": "whether the request defines tools",
    "model": "the target model (scopes every rule: a policy holds only for the model it was measured on)",
}
_FEATURE = re.compile(
    r"(?<![\w.])("
    + "|".join(sorted((k for k in ALLOWED_FEATURES if "_" in k), key=len, reverse=True))
    + r")(?![\w])"
)
_TRUTH = re.compile(r"(= )(True|False|None)\b")


def metric_text(metric: Any) -> str:
    """A policy's metric key ("tpot_s_p50") in words ("TPOT p50")."""
    column, stat, _ = METRICS.get(str(metric), (str(metric), None, ""))
    return metric_words(column, stat)


def feature_text(feature: Any) -> str:
    """A feature key in words ("prompt_tokens_bucket" -> "prompt length (tokens)")."""
    return key_words(feature)


def features_text(features: Iterable[Any]) -> str:
    return ", ".join(feature_text(f) for f in features)


def feature_choice_text(feature: str) -> str:
    """A feature as the fit form offers it: "prompt length (tokens): the prompt's length ..."."""
    return f"{feature_text(feature)}: {FEATURE_HELP.get(feature) or ALLOWED_FEATURES.get(feature, '')}"


def when_text(when: Mapping[str, Any]) -> str:
    """A rule's slice: each feature in words and its value in words, "all traffic" for none."""
    return ", ".join(f"{feature_text(k)} = {plain_value(v)}" for k, v in when.items()) or "all traffic"


def reason_text(text: Any) -> str:
    """A stored overfitting reason ("rule 1 (has_schema = False): ...") with its features and
    values in words."""
    out = _FEATURE.sub(lambda m: DIMENSION_LABELS.get(m.group(1), key_words(m.group(1))), str(text))
    return _TRUTH.sub(
        lambda m: m.group(1) + {"True": "yes", "False": "no", "None": numbers.DASH}[m.group(2)], out
    )


def benefit_text(summary: Mapping[str, Any] | None) -> str:
    """``{"benefit", "lo", "hi", "n"}`` (seconds saved per request) as "+1.23 ms [+0.500, +2.00]
    (n=40)": signed milliseconds, the interval in the same unit."""
    if not summary:
        return numbers.DASH
    b, lo, hi, n = summary.get("benefit"), summary.get("lo"), summary.get("hi"), summary.get("n")
    count = numbers.count(n)
    if b is None:
        return f"{numbers.DASH} (n={count})"
    text = numbers.milliseconds(b, signed=True)
    if lo is not None and hi is not None:
        text += f" [{_bare_ms(lo)}, {_bare_ms(hi)}]"
    return text + f" (n={count})"


def _bare_ms(seconds: Any) -> str:
    return numbers.milliseconds(seconds, signed=True).removesuffix(" ms")


def alternative_text(key: Any) -> str:
    """An alternative rule (``console.policies.alternatives``) in words: "speculation everywhere
    with ngram k=4", "speculation nowhere (the baseline everywhere)"."""
    text = str(key)
    if text.startswith(ALL_ON):
        return f"speculation everywhere with {text.removeprefix(ALL_ON)}"
    if text == ALL_OFF:
        return "speculation nowhere (the baseline everywhere)"
    return text


def requests_needed_text(row: Mapping[str, Any]) -> str:
    """How many more train requests would decide a slice left off only for its interval
    (``console.policies.requests_needed``), in words: "about 140 more requests (200 in all)
    would show it faster, if the effect holds", or why no number would."""
    need = slice_requests_needed(dict(row))
    if need.more is None or need.n_needed is None:
        return need.reason or numbers.DASH
    side = "faster" if (row.get("benefit") or 0) > 0 else "slower"
    return (
        f"about {numbers.count(need.more)} more requests ({numbers.count(need.n_needed)} in all) "
        f"would show it {side}, if the effect holds"
    )
