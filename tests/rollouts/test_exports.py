"""console/rollouts/exports.py: the documents pass the vendored CRD schemas, and the check can fail."""

from __future__ import annotations

import hashlib
import json
import math
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from console.rollouts import exports
from console.rollouts.exports import (
    SkippedTrigger,
    argo_analysis_template,
    exports_yaml,
    flagger_canary_analysis,
    flagger_metric_templates,
    skipped_triggers,
)

CRDS = Path(exports.__file__).resolve().parent / "crds"
PROM = "http://prometheus.monitoring.svc:9090"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

TPOT = (
    "histogram_quantile(0.95, sum by (le) (rate(vllm:time_per_output_token_seconds_bucket{$pool}[$window])))"
)
E2E = "histogram_quantile(0.95, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket{$pool}[$window])))"
ACCEPTANCE = (
    "sum(rate(vllm:spec_decode_num_accepted_tokens_total{$pool}[$window]))"
    " / sum(rate(vllm:spec_decode_num_draft_tokens_total{$pool}[$window]))"
)
PREEMPTIONS = "sum(rate(vllm:num_preemptions_total{$pool}[$window]))"
KV_USAGE = "max(avg_over_time(vllm:kv_cache_usage_perc{$pool}[$window]))"


def trigger(**overrides: Any) -> dict[str, Any]:
    base = {
        "metric": "p95 TPOT (interactive)",
        "op": ">",
        "threshold": 0.004,
        "unit": "s",
        "window_min": 10,
        "compare": "control",
        "query": TPOT,
        "min_samples": 3,
        "action": "pause",
    }
    return {**base, **overrides}


# The worked example of docs/rollouts.md: a vLLM fleet turning on speculative decoding.
FLEET_TRIGGERS = [
    trigger(),
    trigger(
        metric="p95 end-to-end latency",
        threshold=0.25,
        window_min=15,
        query=E2E,
        action="rollback",
    ),
    trigger(
        metric="Draft acceptance rate",
        op="<",
        threshold=0.55,
        unit="ratio",
        compare="absolute",
        query=ACCEPTANCE,
        action="rollback",
    ),
    trigger(metric="Preemptions per second", threshold=0.05, unit="1/s", query=PREEMPTIONS),
    trigger(metric="KV-cache usage", op=">=", threshold=0.1, unit="fraction", query=KV_USAGE, min_samples=5),
    {
        "metric": "p99 TTFT (batch)",
        "op": ">",
        "threshold": 0.5,
        "unit": "s",
        "window_min": 10,
        "compare": "control",
        "min_samples": 3,
        "action": "pause",
    },
]
FLEET_STAGES = [{"share": 5, "minutes": 30}, {"share": 25, "minutes": 30}, {"share": 50, "minutes": 60}]


# -- the CRD check --------------------------------------------------------------------------


def _to_json_schema(node: Any) -> Any:
    """A structural OpenAPI v3 schema as JSON Schema (draft 4, which OpenAPI 3.0 follows).

    Objects with ``properties`` reject unknown fields, as ``kubectl apply`` does with its default
    strict field validation, unless ``x-kubernetes-preserve-unknown-fields`` keeps them. CEL rules
    (``x-kubernetes-validations``) are not evaluated here."""
    if isinstance(node, list):
        return [_to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _to_json_schema(sub) for name, sub in value.items()}
        elif key.startswith("x-kubernetes-") or key in ("nullable", "description"):
            continue
        else:
            out[key] = _to_json_schema(value)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if node.get("x-kubernetes-embedded-resource"):
        out.setdefault("properties", {}).update(
            {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}}
        )
    if "properties" in out and "additionalProperties" not in out:
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    return out


@cache
def _crd_validators() -> dict[tuple[str, str], jsonschema.Draft4Validator]:
    """(apiVersion, kind) -> a validator for each served version of each vendored CRD."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for crd in yaml.load_all(path.read_text(), Loader=loader):  # a safe loader, in C when built
            spec = crd["spec"]
            for version in spec["versions"]:
                if version.get("served"):
                    schema = _to_json_schema(version["schema"]["openAPIV3Schema"])
                    jsonschema.Draft4Validator.check_schema(schema)
                    api_version = f"{spec['group']}/{version['name']}"
                    out[(api_version, spec["names"]["kind"])] = jsonschema.Draft4Validator(schema)
    return out


def crd_errors(doc: dict[str, Any]) -> list[str]:
    """Why the vendored CRD of ``doc``'s kind would refuse it; empty when it is valid."""
    validator = _crd_validators().get((doc.get("apiVersion", ""), doc.get("kind", "")))
    if validator is None:
        return [f"no served CRD for {doc.get('apiVersion')!r} {doc.get('kind')!r}"]
    errors = [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(doc)
    ]
    # ObjectMeta is the API server's own check, not the CRD's: the name must be a DNS subdomain.
    name = doc.get("metadata", {}).get("name", "")
    if not DNS_SUBDOMAIN.match(name) or len(name) > 253:
        errors.append(f"metadata/name: {name!r} is not a DNS subdomain")
    return errors


def assert_valid(doc: dict[str, Any]) -> None:
    errors = crd_errors(doc)
    assert not errors, "\n".join(errors)


def canary(analysis: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "flagger.app/v1beta1",
        "kind": "Canary",
        "metadata": {"name": "llama-70b", "namespace": "serving"},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-70b"},
            "service": {"port": 8000},
            "analysis": analysis,
        },
    }


def fleet_docs() -> list[dict[str, Any]]:
    argo = argo_analysis_template(
        triggers=FLEET_TRIGGERS, name="llama-70b-spec-decode", prometheus_address=PROM
    )
    templates = flagger_metric_templates(
        triggers=FLEET_TRIGGERS, namespace="serving", prometheus_address=PROM
    )
    analysis = flagger_canary_analysis(triggers=FLEET_TRIGGERS, stages=FLEET_STAGES, namespace="serving")
    return [argo, *templates, canary(analysis)]


# -- the check itself can fail ---------------------------------------------------------------


def test_the_check_rejects_a_metric_without_provider():
    doc = argo_analysis_template(triggers=[trigger()], name="t", prometheus_address=PROM)
    del doc["spec"]["metrics"][0]["provider"]
    assert any("'provider' is a required property" in e for e in crd_errors(doc))


def test_the_check_rejects_wrong_types():
    doc = argo_analysis_template(triggers=[trigger()], name="t", prometheus_address=PROM)
    doc["spec"]["metrics"][0]["failureLimit"] = 1.5  # int-or-string: neither
    doc["spec"]["metrics"][0]["interval"] = 600
    errors = crd_errors(doc)
    assert any(e.startswith("spec/metrics/0/failureLimit") for e in errors)
    assert any(e.startswith("spec/metrics/0/interval") for e in errors)

    analysis = flagger_canary_analysis(triggers=[trigger()], stages=FLEET_STAGES, namespace="serving")
    analysis["metrics"][0]["thresholdRange"]["max"] = "0.004"
    analysis["interval"] = "ten minutes"
    errors = crd_errors(canary(analysis))
    assert any(e.startswith("spec/analysis/metrics/0/thresholdRange/max") for e in errors)
    assert any(e.startswith("spec/analysis/interval") for e in errors)


def test_the_check_rejects_unknown_fields_and_kinds():
    (template,) = flagger_metric_templates(triggers=[trigger()], namespace="serving", prometheus_address=PROM)
    template["spec"]["provider"]["adress"] = PROM
    template["spec"]["provider"]["type"] = "prom"
    errors = crd_errors(template)
    assert any("'adress' was unexpected" in e for e in errors)
    assert any(e.startswith("spec/provider/type") for e in errors)
    assert crd_errors({**template, "apiVersion": "flagger.app/v1alpha3"})
    assert crd_errors({**template, "metadata": {"name": "Not A Name"}})


def test_it_reads_int_or_string_as_either():
    doc = argo_analysis_template(triggers=[trigger()], name="t", prometheus_address=PROM)
    doc["spec"]["metrics"][0]["failureLimit"] = "{{args.failure-limit}}"
    assert_valid(doc)


# -- the worked example ----------------------------------------------------------------------


def test_it_exports_the_fleet_example_as_valid_documents():
    docs = fleet_docs()
    assert [d["kind"] for d in docs] == ["AnalysisTemplate"] + ["MetricTemplate"] * 5 + ["Canary"]
    for doc in docs:
        assert_valid(doc)


def test_it_writes_the_argo_metrics_of_the_fleet_example():
    doc = argo_analysis_template(
        triggers=FLEET_TRIGGERS, name="llama-70b-spec-decode", prometheus_address=PROM
    )
    assert doc["spec"]["args"] == [{"name": "canary-hash"}, {"name": "stable-hash"}]
    metrics = {m["name"]: m for m in doc["spec"]["metrics"]}
    assert list(metrics) == [
        "p95-tpot-interactive",
        "p95-end-to-end-latency",
        "draft-acceptance-rate",
        "preemptions-per-second",
        "kv-cache-usage",
    ]
    tpot = metrics["p95-tpot-interactive"]
    canary_q = TPOT.replace("$pool", 'rollouts_pod_template_hash="{{args.canary-hash}}"').replace(
        "$window", "10m"
    )
    stable_q = TPOT.replace("$pool", 'rollouts_pod_template_hash="{{args.stable-hash}}"').replace(
        "$window", "10m"
    )
    assert tpot == {
        "name": "p95-tpot-interactive",
        "interval": "10m",
        "successCondition": "result[0] <= 0.004",
        "failureCondition": "result[0] > 0.004",
        "failureLimit": 2,
        "provider": {"prometheus": {"address": PROM, "query": f"({canary_q}) - ({stable_q})"}},
    }
    assert metrics["p95-end-to-end-latency"]["interval"] == "15m"
    acceptance = metrics["draft-acceptance-rate"]
    assert acceptance["successCondition"] == "result[0] >= 0.55"
    assert acceptance["failureCondition"] == "result[0] < 0.55"
    assert acceptance["provider"]["prometheus"]["query"] == ACCEPTANCE.replace(
        "$pool", 'rollouts_pod_template_hash="{{args.canary-hash}}"'
    ).replace("$window", "10m")
    assert metrics["kv-cache-usage"]["failureCondition"] == "result[0] >= 0.1"
    assert metrics["kv-cache-usage"]["failureLimit"] == 4


def test_it_writes_the_flagger_documents_of_the_fleet_example():
    templates = flagger_metric_templates(
        triggers=FLEET_TRIGGERS, namespace="serving", prometheus_address=PROM
    )
    tpot = templates[0]
    assert tpot["metadata"]["name"] == "p95-tpot-interactive"
    assert tpot["spec"]["provider"] == {"type": "prometheus", "address": PROM}
    canary_q = TPOT.replace("$pool", exports.FLAGGER_CANARY_MATCHERS).replace("$window", "{{ interval }}")
    primary_q = TPOT.replace("$pool", exports.FLAGGER_PRIMARY_MATCHERS).replace("$window", "{{ interval }}")
    assert tpot["spec"]["query"] == f"({canary_q}) - ({primary_q})"
    assert "primary" not in templates[2]["spec"]["query"]  # acceptance rate is absolute

    analysis = flagger_canary_analysis(triggers=FLEET_TRIGGERS, stages=FLEET_STAGES, namespace="serving")
    assert {k: v for k, v in analysis.items() if k != "metrics"} == {
        "interval": "60m",
        "threshold": 3,
        "maxWeight": 50,
        "stepWeights": [5, 25, 50],
    }
    assert analysis["metrics"][0] == {
        "name": "p95-tpot-interactive",
        "templateRef": {"name": "p95-tpot-interactive", "namespace": "serving"},
        "thresholdRange": {"max": 0.004},
        "interval": "10m",
    }
    assert analysis["metrics"][2]["thresholdRange"] == {"min": 0.55}
    assert [m["name"] for m in analysis["metrics"]] == [t["metadata"]["name"] for t in templates]


def test_it_takes_flagger_pod_matchers_as_parameters():
    (template,) = flagger_metric_templates(
        triggers=[trigger(window_min=0.5)],
        namespace="serving",
        prometheus_address=PROM,
        canary_matchers='app="{{ target }}-canary"',
        primary_matchers='app="{{ target }}"',
    )
    assert template["spec"]["query"].count('app="{{ target }}-canary"') == 1
    assert template["spec"]["query"].count('app="{{ target }}"') == 1
    assert "$window" not in template["spec"]["query"]


@pytest.mark.parametrize(
    "op, success, failure, bound",
    [(">", "<=", ">", "max"), (">=", "<", ">=", "max"), ("<", ">=", "<", "min"), ("<=", ">", "<=", "min")],
)
def test_it_maps_each_op(op, success, failure, bound):
    (metric,) = argo_analysis_template(
        triggers=[trigger(op=op, threshold=1e-05, min_samples=1)], name="t", prometheus_address=PROM
    )["spec"]["metrics"]
    assert metric["successCondition"] == f"result[0] {success} 0.00001"
    assert metric["failureCondition"] == f"result[0] {failure} 0.00001"
    assert metric["failureLimit"] == 0
    analysis = flagger_canary_analysis(triggers=[trigger(op=op)], stages=FLEET_STAGES, namespace="serving")
    assert analysis["metrics"][0]["thresholdRange"] == {bound: 0.004}


def test_it_writes_large_and_negative_thresholds_as_plain_decimals():
    metrics = argo_analysis_template(
        triggers=[trigger(threshold=1e20), trigger(metric="other", threshold=-3)],
        name="t",
        prometheus_address=PROM,
    )["spec"]["metrics"]
    assert metrics[0]["failureCondition"] == "result[0] > 100000000000000000000.0"
    assert metrics[1]["failureCondition"] == "result[0] > -3.0"


def test_it_writes_equal_steps_as_step_weight_and_durations_in_seconds():
    analysis = flagger_canary_analysis(
        triggers=[trigger(window_min=0.5)],
        stages=[{"share": 10, "minutes": 1.5}, {"share": 20, "minutes": 1}, {"share": 30, "minutes": 1}],
        namespace="serving",
    )
    assert analysis["interval"] == "90s"
    assert (analysis["maxWeight"], analysis["stepWeight"]) == (30, 10)
    assert "stepWeights" not in analysis
    assert analysis["metrics"][0]["interval"] == "30s"
    assert_valid(canary(analysis))


@pytest.mark.parametrize(
    "stages",
    [
        [],
        [{"share": 2.5, "minutes": 10}],
        [{"share": 0, "minutes": 10}],
        [{"share": 101, "minutes": 10}],
        [{"share": 50, "minutes": 10}, {"share": 25, "minutes": 10}],
        [{"share": 50, "minutes": 0}],
        [{"share": 50, "minutes": float("inf")}],
    ],
)
def test_it_refuses_stages_flagger_cannot_express(stages):
    with pytest.raises(ValueError):
        flagger_canary_analysis(triggers=[trigger()], stages=stages, namespace="serving")


# -- skipped triggers ----------------------------------------------------------------------


def test_it_skips_triggers_without_a_query_and_reports_them():
    legacy = trigger(metric="p99 TTFT (batch)")
    del legacy["query"]
    triggers = [
        legacy,
        trigger(),
        trigger(metric="blank", query="  "),
        trigger(metric="templated", query="sum(x{$pool,a='{{ .Release }}'})"),
        trigger(metric="fleet-wide", query="sum(rate(vllm:num_preemptions_total[$window]))"),
    ]
    skipped = skipped_triggers(triggers=triggers)
    assert [(s.index, s.metric) for s in skipped] == [
        (0, "p99 TTFT (batch)"),
        (2, "blank"),
        (3, "templated"),
        (4, "fleet-wide"),
    ]
    assert skipped[0] == SkippedTrigger(
        index=0, metric="p99 TTFT (batch)", reason="no query: the trigger cannot be evaluated or exported"
    )
    assert "template" in skipped[2].reason and "$pool" in skipped[3].reason
    argo = argo_analysis_template(triggers=triggers, name="t", prometheus_address=PROM)
    assert [m["name"] for m in argo["spec"]["metrics"]] == ["p95-tpot-interactive"]
    assert len(flagger_metric_templates(triggers=triggers, namespace="n", prometheus_address=PROM)) == 1
    assert skipped_triggers(triggers=FLEET_TRIGGERS) == [
        SkippedTrigger(index=5, metric="p99 TTFT (batch)", reason=skipped[0].reason)
    ]


def test_it_refuses_an_analysis_with_nothing_to_measure():
    legacy = trigger()
    del legacy["query"]
    with pytest.raises(ValueError, match="no trigger has a query"):
        argo_analysis_template(triggers=[legacy], name="t", prometheus_address=PROM)
    with pytest.raises(ValueError, match="no trigger has a query"):
        flagger_canary_analysis(triggers=[legacy], stages=FLEET_STAGES, namespace="serving")
    assert flagger_metric_templates(triggers=[legacy], namespace="serving", prometheus_address=PROM) == []


# -- names ---------------------------------------------------------------------------------


def test_it_names_metrics_uniquely_and_validly():
    names = [
        "p95 TPOT",
        "P95 tpot!",
        "p95-tpot",
        "",
        "???",
        "Latenz über 99 %",
        "x" * 200,
        "x" * 199 + "y",
        "request-duration",
        "request success rate",
    ]
    triggers = [trigger(metric=n or "-") for n in names]
    slugs = [
        m["name"]
        for m in argo_analysis_template(triggers=triggers, name="t", prometheus_address=PROM)["spec"][
            "metrics"
        ]
    ]
    assert len(set(slugs)) == len(slugs)
    assert all(DNS_LABEL.match(s) for s in slugs), slugs
    assert slugs[:3] == ["p95-tpot", "p95-tpot-2", "p95-tpot-3"]
    assert slugs[3:6] == ["trigger", "trigger-2", "latenz-uber-99"]
    # Flagger reads these two names as its built-in checks
    assert "request-duration" not in slugs and "request-success-rate" not in slugs
    templates = flagger_metric_templates(triggers=triggers, namespace="serving", prometheus_address=PROM)
    assert [t["metadata"]["name"] for t in templates] == slugs


@pytest.mark.parametrize("name", ["", "Upper", "under_score", "a" * 254, "-lead", "x/y"])
def test_it_refuses_an_invalid_template_name(name):
    with pytest.raises(ValueError):
        argo_analysis_template(triggers=[trigger()], name=name, prometheus_address=PROM)


# -- hostile input ----------------------------------------------------------------------------


def test_a_hostile_trigger_name_comes_out_as_inert_data():
    hostile = '"; rm -rf / #\n---\nkind: Secret\n{{ .Values.token }} {{args.canary-hash}} $(id) `id`'
    triggers = [trigger(metric=hostile), trigger(metric="p95 TPOT", query=KV_USAGE)]
    docs = [
        argo_analysis_template(triggers=triggers, name="t", prometheus_address=PROM),
        *flagger_metric_templates(triggers=triggers, namespace="serving", prometheus_address=PROM),
        canary(flagger_canary_analysis(triggers=triggers, stages=FLEET_STAGES, namespace="serving")),
    ]
    text = exports_yaml(docs)
    loaded = list(yaml.safe_load_all(text))
    assert loaded == docs
    assert [d["kind"] for d in loaded] == ["AnalysisTemplate", "MetricTemplate", "MetricTemplate", "Canary"]
    slug = loaded[0]["spec"]["metrics"][0]["name"]
    assert DNS_LABEL.match(slug) and slug.startswith("rm-rf-kind-secret-values-token")
    assert loaded[1]["metadata"]["name"] == slug
    for doc in loaded[:2]:  # the human name survives, whole, as one JSON string in an annotation
        named = json.loads(doc["metadata"]["annotations"][exports.ANNOTATION])
        assert named[0] == {"name": slug, "metric": hostile, "action": "pause"}
    for doc in loaded:
        assert_valid(doc)
        # the name never reaches a query, a condition or a name
        for path, value in _strings(doc["spec"]):
            assert "rm -rf" not in value and ".Values" not in value, path


def _strings(node: Any, path: str = "") -> list[tuple[str, str]]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in _strings(v, f"{path}/{k}")]
    if isinstance(node, list):
        return [s for i, v in enumerate(node) for s in _strings(v, f"{path}/{i}")]
    return [(path, node)] if isinstance(node, str) else []


@pytest.mark.parametrize("threshold", [math.nan, math.inf, -math.inf, "0.004", None, True, 10**400], ids=repr)
def test_it_refuses_a_threshold_that_is_not_a_finite_number(threshold):
    with pytest.raises(ValueError, match="threshold"):
        argo_analysis_template(triggers=[trigger(threshold=threshold)], name="t", prometheus_address=PROM)
    with pytest.raises(ValueError, match="threshold"):
        flagger_canary_analysis(triggers=[trigger(threshold=threshold)], stages=FLEET_STAGES, namespace="n")


@pytest.mark.parametrize(
    "overrides",
    [
        {"window_min": 0},
        {"window_min": -10},
        {"window_min": 0.001},  # 0.06 s: no duration Flagger's interval pattern accepts
        {"window_min": math.nan},
        {"op": "=="},
        {"compare": "baseline"},
        {"min_samples": 0},
        {"min_samples": 2.5},
        {"action": "page"},
        {"metric": "x" * 201},
    ],
    ids=repr,
)
def test_it_refuses_a_malformed_trigger(overrides):
    with pytest.raises(ValueError):
        argo_analysis_template(triggers=[trigger(**overrides)], name="t", prometheus_address=PROM)


@pytest.mark.parametrize("address", ["prometheus:9090", "http://prom\n:9090", "", "file:///etc/passwd"])
def test_it_refuses_a_prometheus_address_that_is_not_an_http_url(address):
    with pytest.raises(ValueError, match="address"):
        argo_analysis_template(triggers=[trigger()], name="t", prometheus_address=address)


def test_it_passes_the_query_through_untouched_but_for_pool_and_window():
    query = 'sum(rate(x{$pool,path="/$windowed"}[$window])) or vector(0) # ${pool} $pools'
    (template,) = flagger_metric_templates(
        triggers=[trigger(query=query, compare="absolute")], namespace="n", prometheus_address=PROM
    )
    assert template["spec"]["query"] == (
        f'sum(rate(x{{{exports.FLAGGER_CANARY_MATCHERS},path="/$windowed"}}[{{{{ interval }}}}])) or vector(0) # ${{pool}} $pools'
    )


# -- YAML --------------------------------------------------------------------------------------


def test_the_yaml_round_trips():
    docs = fleet_docs()
    text = exports_yaml(docs)
    assert text.startswith("---\n") and text.count("\n---\n") == len(docs) - 1
    assert list(yaml.safe_load_all(text)) == docs
    for doc in yaml.safe_load_all(text):
        assert_valid(doc)


# -- the vendored files ------------------------------------------------------------------------


def test_the_vendored_crds_are_the_files_the_readme_names():
    readme = (CRDS / "README.md").read_text()
    for path in sorted(CRDS.iterdir()):
        if path.name != "README.md":
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            assert f"`{path.name}`" in readme and digest in readme, path.name
    assert {key[1] for key in _crd_validators()} >= {"AnalysisTemplate", "MetricTemplate", "Canary"}


def test_the_docs_show_the_real_output():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "rollouts.md").read_text()
    argo, *templates, canary_doc = fleet_docs()
    assert exports_yaml([argo]).strip() in docs
    assert exports_yaml(templates).strip() in docs
    analysis = yaml.safe_dump(canary_doc["spec"]["analysis"], sort_keys=False, width=4096)
    assert analysis.strip() in docs
