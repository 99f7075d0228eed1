"""An experiment's arms resolved from what the user declared: the baseline, then each candidate
(an A/A arm, one speculative config, or a sweep expanded into one arm per draft length), every
config checked by its own engine before anything is stored (no model is loaded); then stored,
each arm on its content-hashed ServingConfig."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from console.experiments.matrix import arm_label, config_hash, sweep_expand
from console.experiments.models import Arm, Experiment, ServingConfig
from workers.engines import ENGINE_KINDS, EngineConfig, EngineError, engine_config_validate


@dataclass(frozen=True)
class ArmSpec:
    """One arm as it will be stored: its label, engine arguments and speculative config (None:
    the baseline's, for the baseline and A/A arms)."""

    label: str
    engine_args: dict
    speculative_config: dict | None


def serving_config_validate(
    *, engine: str, target_model: str, engine_args: dict, speculative_config: dict | None
) -> list[str]:
    """Messages for everything wrong with a config, asking the engine itself (no model loaded)."""
    if engine not in ENGINE_KINDS:
        return [f"unknown engine {engine!r}; choose one of {', '.join(ENGINE_KINDS)}"]
    if not isinstance(engine_args, dict):
        return ["engine_args must be a JSON object"]
    if speculative_config is not None and not isinstance(speculative_config, dict):
        return ["speculative_config must be a JSON object or null"]
    if speculative_config is not None:
        # Checked for every engine, including servers whose config is only descriptive.
        if not speculative_config.get("method"):
            return [
                'speculative_config needs a "method" (ngram, draft_model, eagle, eagle3, mtp, suffix, ...)'
            ]
        k = speculative_config.get("num_speculative_tokens")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            return [f"num_speculative_tokens must be an integer >= 1, got {k!r}"]
        other = speculative_config.get("engine")
        if other is not None and other != engine:
            return [f"a candidate on engine {other!r} cannot be compared with a baseline on {engine!r}"]
    config = EngineConfig(
        engine=engine,
        target_model=target_model,
        engine_args=engine_args,
        speculative_config=speculative_config,
    )
    try:
        engine_config_validate(config)
    except EngineError as exc:
        return [str(exc)]
    return []


def arms_resolve(
    *,
    engine: str,
    target_model: str,
    baseline_engine_args: dict,
    candidates: list[dict],
    errors: dict[str, list[str]],
) -> list[ArmSpec]:
    """The baseline first, then every candidate's arms in order. Problems go into ``errors``
    (``target_model``, ``baseline``, ``candidates``, ``candidates.N``); the arms are returned
    even then, for the caller to refuse as a whole."""
    if not target_model or not str(target_model).strip():
        errors["target_model"].append("name the target model (a catalog name, a local folder or a GGUF path)")
    for message in serving_config_validate(
        engine=engine, target_model=target_model, engine_args=baseline_engine_args, speculative_config=None
    ):
        errors["baseline"].append(message)
    arms = [ArmSpec("baseline", baseline_engine_args, None)]
    if not candidates:
        errors["candidates"].append("add at least one speculative candidate")
    for i, candidate in enumerate(candidates or []):
        arms += _candidate_arms(
            candidate,
            field=f"candidates.{i}",
            engine=engine,
            target_model=target_model,
            baseline_engine_args=baseline_engine_args,
            errors=errors,
        )
    labels = [arm.label for arm in arms]
    if any(len(label) > 200 for label in labels):
        errors["candidates"].append("an arm label has at most 200 characters")
    if len(set(labels)) != len(labels):
        errors["candidates"].append(
            f"two arms would be the same ({labels}): give them distinct configs or labels"
        )
    return arms


def _candidate_arms(
    candidate: Any,
    *,
    field: str,
    engine: str,
    target_model: str,
    baseline_engine_args: dict,
    errors: dict[str, list[str]],
) -> list[ArmSpec]:
    """One candidate's arms (none when it is refused; its problems go under ``field``)."""
    if isinstance(candidate, dict) and "speculative_config" in candidate and candidate["speculative_config"] is None:
        # An A/A arm: the baseline's own config again, under its own label.
        label = str(candidate.get("label") or "").strip()
        if not label:
            errors[field].append('an A/A arm (speculative_config null) needs a "label", e.g. "baseline A/A"')
        elif candidate.get("engine_args"):
            errors[field].append("an A/A arm repeats the baseline: it takes no engine_args of its own")
        else:
            return [ArmSpec(label, baseline_engine_args, None)]
        return []
    if not isinstance(candidate, dict) or not isinstance(candidate.get("speculative_config"), dict):
        errors[field].append('each candidate needs a "speculative_config" object (vLLM keys), or null for an A/A arm')
        return []
    if candidate.get("engine", engine) != engine:
        errors[field].append(
            f"candidate engine {candidate.get('engine')!r} differs from the baseline's {engine!r}: "
            "arms must run on the same engine to be comparable"
        )
        return []
    engine_args = {**baseline_engine_args, **candidate.get("engine_args", {})}
    try:
        expanded = sweep_expand(candidate["speculative_config"])
    except ValueError as exc:
        errors[field].append(str(exc))
        return []
    arms = []
    for spec in expanded:
        for message in serving_config_validate(
            engine=engine, target_model=target_model, engine_args=engine_args, speculative_config=spec
        ):
            errors[field].append(message)
        label = str(candidate["label"]) if len(expanded) == 1 and candidate.get("label") else arm_label(spec)
        arms.append(ArmSpec(label, engine_args, spec))
    return arms


def serving_config_get_or_create(
    *, name: str, engine: str, target_model: str, engine_args: dict, speculative_config: dict | None
) -> ServingConfig:
    digest = config_hash(
        engine=engine,
        target_model=target_model,
        engine_args=engine_args,
        speculative_config=speculative_config,
    )
    config, _ = ServingConfig.objects.get_or_create(
        content_hash=digest,
        defaults={
            "name": name,
            "engine": engine,
            "target_model": target_model,
            "engine_args": engine_args,
            "speculative_config": speculative_config,
        },
    )
    return config


def arms_store(*, experiment: Experiment, arms: list[ArmSpec], engine: str, target_model: str) -> list[Arm]:
    """The arms' rows, in order (the baseline first at position 0), each on its content-hashed
    config (one row per distinct config, shared across experiments)."""
    rows = []
    for position, arm in enumerate(arms):
        config = serving_config_get_or_create(
            name=arm.label,
            engine=engine,
            target_model=target_model,
            engine_args=arm.engine_args,
            speculative_config=arm.speculative_config,
        )
        rows.append(
            Arm.objects.create(
                experiment=experiment, config=config, label=arm.label, position=position, is_baseline=position == 0
            )
        )
    return rows
