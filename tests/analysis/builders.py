"""Row builders for the analysis tests: one request row per call, hand-checkable defaults."""

from __future__ import annotations

import numpy as np
import pandas as pd

RUN_COLUMNS = ["run_id", "arm", "load", "repeat", "wall_s", "peak_memory_bytes", "mean_util", "energy_j"]


def request_row(**overrides) -> dict:
    """A completed 4-token request in 3 chunks (1, 2, 1 tokens) scheduled at t=0."""
    row = {
        "run_id": 1,
        "arm": "base",
        "is_baseline": True,
        "load": "1x",
        "rate_multiplier": 1.0,
        "repeat": 0,
        "request_id": "r1",
        "task": "chat",
        "traffic_class": "interactive",
        "prompt_tokens": 100,
        "max_tokens": 64,
        "scheduled_s": 0.0,
        "sent_s": 0.1,
        "first_token_s": 0.5,
        "finish_s": 1.1,
        "queue_s": 0.1,
        "chunk_times": [0.5, 0.8, 1.1],
        "chunk_tokens": [1, 2, 1],
        "num_output_tokens": 4,
        "output_token_ids": [1, 2, 3, 4],
        "output_text": "abcd",
        "finish_reason": "stop",
        "error": None,
        "drafted": [],
        "accepted": [],
        "response_format": None,
        "tools": None,
    }
    row.update(overrides)
    return row


def frame(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


def runs_frame(*rows: dict) -> pd.DataFrame:
    base = {"peak_memory_bytes": 1_000, "mean_util": 0.5, "energy_j": np.nan, "accelerator_count": 1}
    return pd.DataFrame([base | r for r in rows])


def synthetic_experiment(
    *,
    n_requests: int = 200,
    arms: dict[str, float] | None = None,
    loads: tuple[str, ...] = ("1x",),
    repeats: int = 2,
    seed: int = 0,
    k: dict[str, int] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Requests and runs for a small experiment. ``arms`` maps arm -> speed factor (decode time
    multiplier; the first arm is the baseline); ``k`` maps arm -> draft length (drafted steps)."""
    arms = arms or {"base": 1.0, "spec": 0.6}
    k = k or {}
    rng = np.random.default_rng(seed)
    tasks = np.array(["chat", "code", "json"])
    req_task = tasks[rng.integers(0, 3, n_requests)]
    req_prompt = rng.integers(10, 3000, n_requests)
    req_tokens = rng.integers(0, 200, n_requests)
    req_class = np.where(rng.random(n_requests) < 0.5, "interactive", "batch")
    rows, runs = [], []
    run_id = 0
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    for li, load in enumerate(loads):
        for rep in range(repeats):
            for ai, (arm, factor) in enumerate(arms.items()):
                run_id += 1
                wall = 0.0
                for i in range(n_requests):
                    sched = i * 0.5
                    n_tok = int(req_tokens[i])
                    ttft = 0.2 + 0.05 * li + rng.exponential(0.05)
                    tpot = 0.02 * factor * (1 + 0.2 * li) * rng.lognormal(0, 0.1)
                    first = sched + ttft
                    kk = k.get(arm, 0)
                    if kk and n_tok:
                        accepted = []
                        left = n_tok - 1
                        while left > 0:
                            a = min(int(rng.integers(0, kk + 1)), max(left - 1, 0))
                            accepted.append(a)
                            left -= a + 1
                        drafted = [kk] * len(accepted)
                        sizes = [1] + [a + 1 for a in accepted]
                    else:
                        accepted, drafted = [], []
                        sizes = [1] * n_tok
                    times = list(first + tpot * np.cumsum([0] + sizes[1:]))
                    finish = times[-1] if times else sched + ttft
                    wall = max(wall, finish)
                    is_json = req_task[i] == "json"
                    rows.append(
                        {
                            "run_id": run_id,
                            "arm": arm,
                            "is_baseline": ai == 0,
                            "load": load,
                            "rate_multiplier": float(li + 1),
                            "repeat": rep,
                            "request_id": f"r{i}",
                            "task": req_task[i],
                            "traffic_class": req_class[i],
                            "prompt_tokens": int(req_prompt[i]),
                            "max_tokens": 256,
                            "scheduled_s": sched,
                            "sent_s": sched + 0.01,
                            "first_token_s": first if n_tok else np.nan,
                            "finish_s": finish,
                            "queue_s": 0.01,
                            "chunk_times": times if n_tok else [],
                            "chunk_tokens": sizes if n_tok else [],
                            "num_output_tokens": n_tok,
                            "output_token_ids": list(range(n_tok)),
                            "output_text": '{"a": 1}' if is_json else "text",
                            "finish_reason": "stop",
                            "error": None,
                            "drafted": drafted,
                            "accepted": accepted,
                            "response_format": {"type": "json_schema", "json_schema": {"schema": schema}}
                            if is_json
                            else None,
                            "tools": None,
                        }
                    )
                runs.append({"run_id": run_id, "arm": arm, "load": load, "repeat": rep, "wall_s": wall + 1.0})
    return pd.DataFrame(rows), runs_frame(*runs)


def server_counters(drafts, draft_tokens, accepted, per_pos=None):
    """A run's spec-decode counter deltas as the openai engine stores them (vLLM's names)."""
    out = {
        "spec_decode_num_drafts": drafts,
        "spec_decode_num_draft_tokens": draft_tokens,
        "spec_decode_num_accepted_tokens": accepted,
    }
    if per_pos is not None:
        out["spec_decode_num_accepted_tokens_per_pos"] = per_pos
    return out
