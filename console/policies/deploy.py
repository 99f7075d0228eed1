"""What an operator deploys for a slice policy: one vLLM server per pool, and the slice-to-pool
rule as a LiteLLM router config (pure functions; the experiment's arm configs come from
``selectors.policy_deployment``).

Pools: the baseline (no speculation) and one per candidate arm a rule routes to, each started by
one ``vllm serve`` line with that arm's ``speculative_config`` (specreview stores vLLM's own keys
and method names, see ``workers.engines.vllm_config``) as JSON. Only a ``vllm`` arm's ``engine_args`` are
vLLM arguments; other engines' args (an OpenAI server URL, ...) are left out.

Routing: LiteLLM's tag filtering picks, inside one model group, the deployments carrying a tag the
request carries; it has no ordered conditions. The first-match rule list is therefore expanded
here into a decision table over the features the rules use: each feature's values named by a rule
plus ``*`` (any other value), every combination evaluated first-match, exactly as
``router.policy_route`` does. Each combination is one **slice tag**; each pool's deployment carries
the tags routed to it; the client sends the one tag of its request (``slice_tag``). The pool of
the all-``*`` combination also carries LiteLLM's ``default`` tag, so an untagged request (features
not computed) or an unknown tag goes where a request with unseen feature values goes.

Everything user-controlled (arm labels, model names, feature values) reaches a shell line only
through ``shlex`` and the YAML only through ``yaml.safe_dump``; feature values in tags are
percent-encoded, so a tag never holds a comma (LiteLLM's ``x-litellm-tags`` header separator).
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import yaml

from console.jsonutil import canonical_json
from console.policies import features

ROUTER = "litellm"
TAG_PREFIX = "specreview-slice:"
OTHER = "*"  # any value no rule names; quote() encodes a literal "*" value as %2A
MAX_TAGS = 20000
FIRST_PORT = 8100
# specreview's own engine_args keys (which queue runs a config), never vLLM arguments.
SPECREVIEW_ENGINE_ARGS = frozenset({"device"})
_ARG_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class DeployError(ValueError):
    """The policy cannot be turned into serving pools or a router config (message says why)."""


@dataclass(frozen=True)
class ArmServing:
    """What one arm of the experiment served: its engine, model, engine args, speculative config."""

    label: str
    engine: str
    target_model: str
    engine_args: Mapping[str, Any] = field(default_factory=dict)
    speculative_config: Mapping[str, Any] | None = None


@dataclass
class Pool:
    name: str
    arm: ArmServing
    port: int
    rules: list[int] = field(default_factory=list)  # 1-based rule numbers routed here
    tags: list[str] = field(default_factory=list)
    is_default: bool = False
    argv: list[str] = field(default_factory=list)  # its vllm serve command, as arguments

    @property
    def is_baseline(self) -> bool:
        return self.arm.speculative_config is None


def _arg_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return canonical_json(value)


def serve_argv(*, arm: ArmServing, served_model: str, port: int) -> list[str]:
    """``vllm serve`` arguments for one pool. Values go in ``--flag=value`` form so none can be
    read as another option; a model name starting with ``-`` (the positional) is refused."""
    if not arm.target_model or arm.target_model.startswith("-"):
        raise DeployError(
            f"arm {arm.label!r}: target model {arm.target_model!r} cannot be passed to vllm serve"
        )
    argv = ["vllm", "serve", arm.target_model, f"--served-model-name={served_model}", f"--port={port}"]
    if arm.engine == "vllm":
        for key, value in sorted(arm.engine_args.items()):
            if key in SPECREVIEW_ENGINE_ARGS or value is None:
                continue
            if not _ARG_NAME.match(key):
                raise DeployError(f"arm {arm.label!r}: engine_args key {key!r} is not a vLLM argument name")
            flag = "--" + key.replace("_", "-")
            if isinstance(value, bool):
                argv.append(flag if value else "--no-" + flag[2:])
            else:
                argv.append(f"{flag}={_arg_value(value)}")
    if arm.speculative_config is not None:
        argv += ["--speculative-config", canonical_json(dict(arm.speculative_config))]
    return argv


def serve_command(argv: Sequence[str]) -> str:
    return shlex.join(argv)


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return quote(str(value), safe="")


def routed_features(rules: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Features the rules condition on (``model`` excluded: it is the router's model group), in
    allowlist order, each with the values the rules name, in first-seen order."""
    seen: dict[str, list[Any]] = {}
    for rule in rules:
        for name, value in (rule.get("when") or {}).items():
            if name == "model":
                continue
            values = seen.setdefault(name, [])
            if not any(_same(value, v) for v in values):
                values.append(value)
    order = list(features.ALLOWED_FEATURES)
    return {k: seen[k] for k in sorted(seen, key=lambda k: (order.index(k) if k in order else len(order), k))}


def slice_tag(features: Mapping[str, Any], domains: Mapping[str, Sequence[Any]]) -> str:
    """The tag a client sends for a request with ``features`` (feature name -> value, as the
    policy computes them): each routed feature as ``name=value`` joined by ``&``, a value no rule
    names as ``*``, values percent-encoded."""
    parts = []
    for name, values in domains.items():
        value: Any = features.get(name)
        if value is not None and hasattr(value, "item") and not isinstance(value, str):
            value = value.item()  # a numpy scalar from a feature frame
        known = any(_same(value, v) for v in values)
        parts.append(f"{name}={_value_text(value) if known else OTHER}")
    return TAG_PREFIX + "&".join(parts)


def _same(a: Any, b: Any) -> bool:
    # True == 1 in Python; a bool feature must not match an int or string value, nor the reverse.
    return type(a) is type(b) and a == b


def _first_rule(rules: Sequence[Mapping[str, Any]], cell: Mapping[str, Any], model: str) -> int | None:
    for i, rule in enumerate(rules):
        when = rule.get("when") or {}
        if "model" in when and when["model"] != model:
            continue
        conditions = [(name, v) for name, v in when.items() if name != "model"]
        if all(cell.get(name, _Other) is not _Other and _same(cell[name], v) for name, v in conditions):
            return i
    return None


class _OtherType:
    def __repr__(self) -> str:
        return OTHER


_Other = _OtherType()


@dataclass
class Deployment:
    policy_id: int
    rules_sha256: str
    model: str
    pools: list[Pool]
    domains: dict[str, list[Any]]
    table: list[dict[str, Any]]  # one row per slice tag: when, tag, rule (1-based), pool


def _pool_for(
    pools: dict[str | None, Pool],
    arm_label: str | None,
    *,
    baseline: ArmServing,
    candidates: Mapping[str, ArmServing],
    rules: Sequence[Mapping[str, Any]],
) -> Pool:
    """The pool serving ``arm_label`` (None: the baseline), added to ``pools`` on first use once
    the arm's stored speculative config is the one the rules state."""
    if arm_label not in pools:
        if arm_label is None:
            arm = baseline
            name = "baseline"
        else:
            if arm_label not in candidates:
                raise DeployError(f"a rule routes to arm {arm_label!r}, which the experiment no longer has")
            arm = candidates[arm_label]
            stated = next(r.get("speculative_config") for r in rules if r.get("arm") == arm_label)
            if arm.speculative_config is None or dict(arm.speculative_config) != stated:
                raise DeployError(
                    f"arm {arm_label!r}: the experiment's stored speculative_config "
                    f"{canonical_json(arm.speculative_config)} differs from the rules' {canonical_json(stated)}"
                )
            name = f"spec-{sum(1 for k in pools if k is not None) + 1}"
        pools[arm_label] = Pool(name=name, arm=arm, port=0)
    return pools[arm_label]


def deployment_build(
    *,
    policy_id: int,
    rules_sha256: str,
    document: Mapping[str, Any],
    model: str,
    baseline: ArmServing,
    candidates: Mapping[str, ArmServing],
) -> Deployment:
    """Pools and the decision table for a rules document (``router.rules_document``) fitted on
    ``model``. ``candidates``: arm label -> what it served, for every arm a rule routes to."""
    rules = list(document.get("rules") or [])
    if not rules:
        raise DeployError("the policy has no rules")
    domains = routed_features(rules)
    n_cells = 1
    for values in domains.values():
        n_cells *= len(values) + 1
    if n_cells > MAX_TAGS:
        raise DeployError(
            f"the rules expand to {n_cells} slice tags (more than {MAX_TAGS}): fit on fewer features"
        )
    pools: dict[str | None, Pool] = {}

    def pool_for(arm_label: str | None) -> Pool:
        return _pool_for(pools, arm_label, baseline=baseline, candidates=candidates, rules=rules)

    table = []
    names = list(domains)
    for combo in itertools.product(*[[*values, _Other] for values in domains.values()]):
        cell = dict(zip(names, combo, strict=True))
        index = _first_rule(rules, cell, model)
        arm_label = rules[index].get("arm") if index is not None else None
        pool = pool_for(arm_label)
        tag = TAG_PREFIX + "&".join(
            f"{n}={OTHER if v is _Other else _value_text(v)}" for n, v in cell.items()
        )
        pool.tags.append(tag)
        if index is not None and index + 1 not in pool.rules:
            pool.rules.append(index + 1)
        if all(v is _Other for v in combo):
            pool.is_default = True
        table.append(
            {
                "when": {n: (OTHER if v is _Other else v) for n, v in cell.items()},
                "tag": tag,
                "rule": None if index is None else index + 1,
                "pool": pool.name,
            }
        )
    ordered = [p for p in pools.values() if p.is_baseline] + [p for p in pools.values() if not p.is_baseline]
    for i, pool in enumerate(ordered):
        pool.port = FIRST_PORT + i
        pool.rules.sort()
        # Built here, so a value that cannot go on a vLLM command line is refused with the rest.
        pool.argv = serve_argv(arm=pool.arm, served_model=model, port=pool.port)
    return Deployment(
        policy_id=policy_id,
        rules_sha256=rules_sha256,
        model=model,
        pools=ordered,
        domains=domains,
        table=table,
    )


def serve_lines(deployment: Deployment) -> list[dict[str, Any]]:
    """One entry per pool: its name, arm, argv and the shell-quoted command line."""
    out = []
    for pool in deployment.pools:
        argv = pool.argv
        out.append(
            {
                "pool": pool.name,
                "arm": pool.arm.label,
                "baseline": pool.is_baseline,
                "default": pool.is_default,
                "engine": pool.arm.engine,
                "speculative_config": pool.arm.speculative_config,
                "port": pool.port,
                "rules": pool.rules,
                "argv": argv,
                "command": serve_command(argv),
            }
        )
    return out


def serve_script(deployment: Deployment) -> str:
    """The ``vllm serve`` lines as one text file. Comments hold only ids, hashes and pool names
    this module makes (never a label or a model name, which could carry a newline)."""
    lines = [
        f"# specreview slice policy {deployment.policy_id}, rules sha256 {deployment.rules_sha256}",
        "# One vLLM server per pool: run each line on the host (or GPU) the router config's api_base names.",
    ]
    for entry in serve_lines(deployment):
        role = "baseline, no speculation" if entry["baseline"] else "speculative"
        if entry["default"]:
            role += "; router default"
        lines.append(f"# pool {entry['pool']} ({role}), port {entry['port']}")
        lines.append(entry["command"])
    return "\n".join(lines) + "\n"


def router_config(deployment: Deployment, *, host: str = "127.0.0.1") -> dict[str, Any]:
    """The LiteLLM proxy config (``model_list`` + ``router_settings``): one deployment per pool in
    the model group ``deployment.model``, tagged with its slice tags."""
    model_list = []
    for pool in deployment.pools:
        tags = list(pool.tags)
        if pool.is_default:
            tags.append("default")
        model_list.append(
            {
                "model_name": deployment.model,
                "litellm_params": {
                    "model": f"hosted_vllm/{deployment.model}",
                    "api_base": f"http://{host}:{pool.port}/v1",
                    "tags": tags,
                },
                "model_info": {
                    "id": f"specreview-policy-{deployment.policy_id}-{pool.name}",
                    "specreview_pool": pool.name,
                    "specreview_arm": pool.arm.label,
                    "specreview_rules": pool.rules,
                    "specreview_speculative_config": (
                        None if pool.arm.speculative_config is None else dict(pool.arm.speculative_config)
                    ),
                },
            }
        )
    return {"model_list": model_list, "router_settings": {"enable_tag_filtering": True}}


def router_yaml(deployment: Deployment) -> str:
    """``router_config`` as YAML (``yaml.safe_dump``: every user string is quoted or escaped)."""
    header = (
        f"# LiteLLM proxy config for specreview slice policy {deployment.policy_id} "
        f"(rules sha256 {deployment.rules_sha256}).\n"
        "# Clients send one tag per request (header x-litellm-tags or metadata.tags): the slice tag of\n"
        "# its features, see docs/policies.md. Untagged or unknown tags go to the pool tagged 'default'.\n"
    )
    body = yaml.safe_dump(router_config(deployment), sort_keys=False, allow_unicode=False, width=10_000)
    return header + body


def deployment_document(deployment: Deployment) -> dict[str, Any]:
    """Everything above as one JSON-able object (the API's answer)."""
    return {
        "router": ROUTER,
        "model": deployment.model,
        "rules_sha256": deployment.rules_sha256,
        "tag_prefix": TAG_PREFIX,
        "other": OTHER,
        "features": {name: list(values) for name, values in deployment.domains.items()},
        "pools": serve_lines(deployment),
        "table": deployment.table,
        "router_config": router_config(deployment),
    }
