"""Rollback triggers as data: their checks name the field, the typed lines round-trip, the API
and the form refuse what a rollout could not evaluate, and triggers written before the query,
comparison, looks and action existed still read."""

from __future__ import annotations

import pytest

from console.decisions.triggers import (
    TriggerError,
    trigger_full,
    trigger_problems,
    triggers_check,
    triggers_text,
    triggers_text_parse,
)
from tests.decisions.test_api import post_json

TPOT = {
    "metric": "p95 TPOT",
    "op": ">",
    "threshold": 0.004,
    "unit": "s",
    "window_min": 2,
    "compare": "control",
    "query": 'histogram_quantile(0.95, sum by (le) (rate(tpot_bucket{model=~"a|b",$pool}[$window])))',
    "min_samples": 5,
    "action": "rollback",
}


def test_it_reads_a_trigger_written_before_queries_with_the_defaults():
    old = {"metric": "p95 TPOT (interactive)", "op": ">", "threshold": 0.05, "unit": "s", "window_min": 10}
    assert trigger_problems(old) == []
    assert trigger_full(old) | {} == old | {
        "compare": "absolute",
        "query": "",
        "min_samples": 3,
        "action": "pause",
    }


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"op": "about"}, "op:"),
        ({"threshold": float("nan")}, "threshold:"),
        ({"threshold": True}, "threshold:"),
        ({"window_min": 0}, "window_min:"),
        ({"compare": "sideways"}, "compare:"),
        ({"query": "up\nor vector(1)"}, "query:"),
        ({"query": "x" * 2001}, "query:"),
        ({"query": "sum(rate(tpot_count[$window]))"}, "$pool"),  # the same value on both pools
        ({"query": ""}, "needs the PromQL query"),
        ({"min_samples": 0}, "min_samples:"),
        ({"min_samples": 2.5}, "min_samples:"),
        ({"action": "shrug"}, "action:"),
        ({"owner": "me"}, "unknown field(s) owner"),
    ],
)
def test_it_names_the_field_of_a_bad_trigger(change, field):
    problems = trigger_problems(TPOT | change)
    assert problems and field in "; ".join(problems)
    with pytest.raises(TriggerError, match="trigger 2"):
        triggers_check([TPOT, TPOT | change])


def test_the_typed_lines_round_trip_with_pipes_inside_the_query():
    text = triggers_text(
        [TPOT, {"metric": "errors", "op": ">=", "threshold": 1, "unit": "count", "window_min": 5}]
    )
    assert (
        text.splitlines()[1] == "errors | >= | 1 | count | 5"
    )  # a trigger without the new fields stays short
    assert triggers_text_parse(text) == [
        TPOT,
        trigger_full(
            triggers_check(
                [{"metric": "errors", "op": ">=", "threshold": 1, "unit": "count", "window_min": 5}]
            )[0]
        ),
    ]


def test_it_names_the_line_of_a_bad_typed_trigger():
    with pytest.raises(TriggerError, match="line 3: compare: one of control, absolute"):
        triggers_text_parse("a | > | 1 | s | 5\n\nb | > | 1 | s | 5 | sideways | 3 | pause | up{$pool}")
    with pytest.raises(TriggerError, match="line 1: write"):
        triggers_text_parse("a | > | 1 | s | 5 | control")


def test_the_api_stores_triggers_whole_and_refuses_what_a_rollout_could_not_evaluate(
    client, draft, engineer, api_token_for
):
    headers, url = api_token_for(engineer), f"/api/decisions/{draft.pk}"
    for bad in ({"compare": "control", "query": ""}, {"query": "up{$pool}\n"}, {"min_samples": "5"}):
        response = post_json(client, url, {"rollback_triggers": [TPOT | bad]}, headers, method="patch")
        assert response.status_code == 400, bad
    draft.refresh_from_db()
    assert draft.rollback_triggers != [TPOT]  # nothing half-stored
    response = post_json(client, url, {"rollback_triggers": [TPOT]}, headers, method="patch")
    assert response.status_code == 200
    assert response.json()["rollback"]["triggers"] == [TPOT]
    plain = {"metric": "errors", "op": ">", "threshold": 0, "window_min": 5}
    response = post_json(client, url, {"rollback_triggers": [plain]}, headers, method="patch")
    draft.refresh_from_db()
    assert draft.rollback_triggers == [trigger_full(plain | {"unit": ""})]
