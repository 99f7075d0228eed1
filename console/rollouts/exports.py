"""A decision's rollback triggers as Argo Rollouts and Flagger analysis (docs/rollouts.md).

Pure functions over the triggers' plain dicts; each returns the plain dict of one Kubernetes
document (or a list of them), and ``exports_yaml`` writes them out. The documents are checked
against the CRD schemas vendored in ``crds/`` by tests/rollouts/test_exports.py.

Hostile input: a trigger's name reaches the output only as a slug (a metric or template name)
and as a YAML string value (an annotation); its query is the user's PromQL, passed through
with only ``$pool`` and ``$window`` replaced, never parsed. A query that holds ``{{`` is not
exported: both controllers expand ``{{ ... }}`` as templates before the query reaches Prometheus.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import yaml

ARGO_API_VERSION = "argoproj.io/v1alpha1"
FLAGGER_API_VERSION = "flagger.app/v1beta1"

# Flagger's own convention for a Deployment target: the canary's pods are `<target>-<rs>-<pod>`,
# the primary's `<target>-primary-<rs>-<pod>` (Prometheus anchors the regex at both ends).
FLAGGER_CANARY_MATCHERS = 'namespace="{{ namespace }}",pod=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"'
FLAGGER_PRIMARY_MATCHERS = (
    'namespace="{{ namespace }}",pod=~"{{ target }}-primary-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"'
)

ANNOTATION = "specreview/triggers"
OPS = (">", ">=", "<", "<=")
# Flagger treats metrics with these names as its built-in checks, whatever their templateRef says.
_FLAGGER_BUILTIN_NAMES = frozenset({"request-success-rate", "request-duration"})
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_POOL = re.compile(r"\$pool\b")
_WINDOW = re.compile(r"\$window\b")
_SLUG_MAX = 58  # leaves room for a "-NN" suffix inside a 63-character DNS label


@dataclass(frozen=True)
class SkippedTrigger:
    """A trigger left out of every export; ``index`` is its position in the decision's list."""

    index: int
    metric: str
    reason: str


@dataclass(frozen=True)
class _Trigger:
    slug: str
    metric: str
    op: str
    threshold: float
    window: str  # a Prometheus/Go/Flagger duration: "10m", "30s"
    compare: str
    query: str
    min_samples: int
    action: str


def skipped_triggers(*, triggers: Sequence[Mapping[str, Any]]) -> list[SkippedTrigger]:
    """The triggers no export carries, each with the reason a user can act on."""
    out = []
    for index, raw in enumerate(triggers):
        reason = _skip_reason(_mapping(raw, index))
        if reason:
            out.append(SkippedTrigger(index=index, metric=str(raw.get("metric", ""))[:200], reason=reason))
    return out


def argo_analysis_template(
    *,
    triggers: Sequence[Mapping[str, Any]],
    name: str,
    prometheus_address: str,
    pool_label: str = "rollouts_pod_template_hash",
) -> dict[str, Any]:
    """An Argo Rollouts AnalysisTemplate with one Prometheus metric per exportable trigger.

    ``pool_label`` is the Prometheus label carrying the pod template hash; the Rollout passes
    the ``canary-hash`` and ``stable-hash`` args (``podTemplateHashValue: Latest`` / ``Stable``).
    Each metric measures every ``window`` (its query's range) and fails the analysis once more than
    ``failureLimit = min_samples - 1`` measurements breached, i.e. at the ``min_samples``-th breach.
    """
    _require(_DNS_SUBDOMAIN.match(name), f"template name {name!r} is not a Kubernetes name")
    _require(re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", pool_label), f"pool label {pool_label!r} is invalid")
    address = _address(prometheus_address)
    parsed = _exportable(triggers)
    canary = f'{pool_label}="{{{{args.canary-hash}}}}"'
    stable = f'{pool_label}="{{{{args.stable-hash}}}}"'
    metrics = []
    for t in parsed:
        metrics.append(
            {
                "name": t.slug,
                "interval": t.window,
                "successCondition": f"result[0] {_NEGATED[t.op]} {_expr_number(t.threshold)}",
                "failureCondition": f"result[0] {t.op} {_expr_number(t.threshold)}",
                "failureLimit": t.min_samples - 1,
                "provider": {"prometheus": {"address": address, "query": _query(t, canary, stable)}},
            }
        )
    return {
        "apiVersion": ARGO_API_VERSION,
        "kind": "AnalysisTemplate",
        "metadata": {"name": name, "annotations": {ANNOTATION: _names_annotation(parsed)}},
        "spec": {"args": [{"name": "canary-hash"}, {"name": "stable-hash"}], "metrics": metrics},
    }


def flagger_metric_templates(
    *,
    triggers: Sequence[Mapping[str, Any]],
    namespace: str,
    prometheus_address: str,
    canary_matchers: str = FLAGGER_CANARY_MATCHERS,
    primary_matchers: str = FLAGGER_PRIMARY_MATCHERS,
) -> list[dict[str, Any]]:
    """One Flagger MetricTemplate per exportable trigger, named by the trigger's slug.

    ``$window`` becomes ``{{ interval }}``, which Flagger fills with the Canary metric's
    ``interval`` (the trigger's window, see ``flagger_canary_analysis``).
    """
    _require(_DNS_LABEL.match(namespace), f"namespace {namespace!r} is not a Kubernetes namespace")
    address = _address(prometheus_address)
    docs = []
    for t in _exportable(triggers, allow_empty=True):
        query = _query(t, canary_matchers, primary_matchers, window="{{ interval }}")
        docs.append(
            {
                "apiVersion": FLAGGER_API_VERSION,
                "kind": "MetricTemplate",
                "metadata": {
                    "name": t.slug,
                    "namespace": namespace,
                    "annotations": {ANNOTATION: _names_annotation([t])},
                },
                "spec": {"provider": {"type": "prometheus", "address": address}, "query": query},
            }
        )
    return docs


def flagger_canary_analysis(
    *, triggers: Sequence[Mapping[str, Any]], stages: Sequence[Mapping[str, Any]], namespace: str
) -> dict[str, Any]:
    """The ``spec.analysis`` block of a Flagger Canary for these triggers and traffic stages.

    ``stages`` are ``{"share": percent of traffic 0-100, "minutes": how long it holds}``.
    Flagger holds every weight for one ``interval`` and checks all metrics once per interval,
    so ``interval`` is the longest stage (no stage soaks less than planned). Equally spaced
    shares become ``stepWeight``; others ``stepWeights``. ``threshold`` (failed checks before
    rollback, shared by all metrics) is the smallest ``min_samples``.
    """
    _require(_DNS_LABEL.match(namespace), f"namespace {namespace!r} is not a Kubernetes namespace")
    parsed = _exportable(triggers)
    shares, seconds = _stages(stages)
    step = shares[0]
    weights: dict[str, Any] = {"maxWeight": shares[-1]}
    if shares == [step * (i + 1) for i in range(len(shares))]:
        weights["stepWeight"] = step
    else:
        weights["stepWeights"] = shares
    metrics = []
    for t in parsed:
        bound = "max" if t.op in (">", ">=") else "min"
        metrics.append(
            {
                "name": t.slug,
                "templateRef": {"name": t.slug, "namespace": namespace},
                "thresholdRange": {bound: t.threshold},
                "interval": t.window,
            }
        )
    return {
        "interval": _duration_from_seconds(max(seconds)),
        "threshold": min(t.min_samples for t in parsed),
        **weights,
        "metrics": metrics,
    }


def exports_yaml(docs: Sequence[Mapping[str, Any]]) -> str:
    """The documents as one multi-document YAML stream (``kubectl apply -f -`` reads it)."""
    return yaml.safe_dump_all(
        [dict(d) for d in docs], explicit_start=True, sort_keys=False, allow_unicode=True, width=4096
    )


_NEGATED = {">": "<=", ">=": "<", "<": ">=", "<=": ">"}


def _exportable(triggers: Sequence[Mapping[str, Any]], *, allow_empty: bool = False) -> list[_Trigger]:
    out: list[_Trigger] = []
    taken: set[str] = set()
    for index, raw in enumerate(triggers):
        raw = _mapping(raw, index)
        if _skip_reason(raw) is None:
            out.append(_parse(raw, index, taken))
    _require(out or allow_empty, "no trigger has a query that can be exported (see skipped_triggers)")
    return out


def _mapping(raw: Any, index: int) -> Mapping[str, Any]:
    _require(isinstance(raw, Mapping), f"trigger {index} is not a mapping")
    return raw


def _skip_reason(raw: Mapping[str, Any]) -> str | None:
    query = raw.get("query")
    if not isinstance(query, str) or not query.strip():
        return "no query: the trigger cannot be evaluated or exported"
    if "{{" in query:
        return "the query contains '{{', which Argo Rollouts and Flagger would expand as a template"
    if not _POOL.search(query):
        return "the query has no $pool, so it cannot tell the canary's pods from the control's"
    return None


def _parse(raw: Mapping[str, Any], index: int, taken: set[str]) -> _Trigger:
    where = f"trigger {index}"
    metric = raw.get("metric")
    _require(isinstance(metric, str) and 0 < len(metric) <= 200, f"{where}: metric must be 1-200 characters")
    op = raw.get("op")
    _require(op in OPS, f"{where}: op must be one of {', '.join(OPS)}")
    threshold = _finite(raw.get("threshold"), f"{where}: threshold")
    window_min = _finite(raw.get("window_min"), f"{where}: window_min")
    _require(window_min > 0, f"{where}: window_min must be > 0 minutes")
    compare = raw.get("compare")
    _require(compare in ("control", "absolute"), f"{where}: compare must be 'control' or 'absolute'")
    min_samples = raw.get("min_samples")
    _require(
        isinstance(min_samples, int) and not isinstance(min_samples, bool) and min_samples >= 1,
        f"{where}: min_samples must be an integer >= 1",
    )
    action = raw.get("action")
    _require(action in ("pause", "rollback"), f"{where}: action must be 'pause' or 'rollback'")
    seconds = window_min * 60
    _require(abs(seconds - round(seconds)) < 1e-6, f"{where}: window_min must be a whole number of seconds")
    return _Trigger(
        slug=_unique_slug(str(metric), taken),
        metric=str(metric),
        op=str(op),
        threshold=threshold,
        window=_duration_from_seconds(round(seconds)),
        compare=str(compare),
        query=str(raw["query"]),
        min_samples=int(min_samples),  # type: ignore[arg-type]
        action=str(action),
    )


def _stages(stages: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[int]]:
    _require(len(stages) > 0, "at least one stage is needed")
    shares: list[int] = []
    seconds: list[int] = []
    for i, stage in enumerate(stages):
        share = _finite(stage.get("share"), f"stage {i}: share")
        # Flagger's weights are Go ints: a fractional percent cannot be expressed.
        _require(share == int(share) and 0 < share <= 100, f"stage {i}: share must be a whole percent 1-100")
        _require(not shares or share > shares[-1], f"stage {i}: shares must increase")
        minutes = _finite(stage.get("minutes"), f"stage {i}: minutes")
        s = minutes * 60
        _require(minutes > 0 and abs(s - round(s)) < 1e-6, f"stage {i}: minutes must be whole seconds > 0")
        shares.append(int(share))
        seconds.append(round(s))
    return shares, seconds


def _query(t: _Trigger, canary: str, control: str, *, window: str | None = None) -> str:
    def fill(pool: str) -> str:
        q = _POOL.sub(lambda _: pool, t.query)
        return _WINDOW.sub(lambda _: window or t.window, q)

    if t.compare == "control":
        return f"({fill(canary)}) - ({fill(control)})"
    return fill(canary)


def _unique_slug(metric: str, taken: set[str]) -> str:
    ascii_name = unicodedata.normalize("NFKD", metric).encode("ascii", "ignore").decode()
    base = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:_SLUG_MAX].rstrip("-") or "trigger"
    slug, n = base, 1
    while slug in taken or slug in _FLAGGER_BUILTIN_NAMES:
        n += 1
        slug = f"{base}-{n}"
    taken.add(slug)
    return slug


def _names_annotation(parsed: Sequence[_Trigger]) -> str:
    # The human names travel as JSON inside one annotation value: data, never a key or a name.
    return json.dumps(
        [{"name": t.slug, "metric": t.metric, "action": t.action} for t in parsed], ensure_ascii=False
    )


def _duration_from_seconds(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def _expr_number(value: float) -> str:
    # Argo's expression language reads plain decimals; write the float's shortest repr without an
    # exponent, and always with a point so a large value is not read as an overflowing int.
    text = format(Decimal(repr(value)), "f")
    return text if "." in text else f"{text}.0"


def _finite(value: Any, what: str) -> float:
    _require(
        isinstance(value, int | float) and not isinstance(value, bool),
        f"{what} must be a number, not {value!r}",
    )
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"{what} must be finite, not an integer that large") from None
    _require(math.isfinite(number), f"{what} must be finite, not {value!r}")
    return number


def _address(address: str) -> str:
    ok = isinstance(address, str) and re.fullmatch(r"https?://[^\s\x00-\x1f\x7f]+", address) is not None
    try:
        parts = urlsplit(address) if ok else None
        ok = bool(parts and parts.hostname and not parts.username and not parts.password)
    except ValueError:  # an unclosed IPv6 bracket and the like
        ok = False
    _require(ok, f"Prometheus address {str(address)[:200]!r} must be an http(s) URL with a host")
    return address


def _require(ok: object, message: str) -> None:
    if not ok:
        raise ValueError(message)
