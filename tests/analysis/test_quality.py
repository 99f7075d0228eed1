import numpy as np
import pandas as pd

from console.analysis.quality import json_fence_strip, quality_flags, response_format_check, tool_call_check
from console.analysis.quality_pairs import exact_match, quality_counts, quality_rates, quality_regressions
from tests.analysis.builders import frame, request_row

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_it_strips_a_json_fence_around_the_whole_output():
    assert json_fence_strip('```json\n{"a": 1}\n```') == '{"a": 1}'
    assert json_fence_strip('  ```\n{"a": 1}```  ') == '{"a": 1}'
    assert json_fence_strip('Sure: ```json\n{"a": 1}\n```') == 'Sure: ```json\n{"a": 1}\n```'


def test_it_validates_json_against_the_schema():
    assert response_format_check('{"a": 1}', JSON_SCHEMA) == {
        "json_valid": True,
        "schema_valid": True,
        "reason": None,
    }
    fenced = response_format_check('```json\n{"a": 2}\n```', JSON_SCHEMA)
    assert fenced["schema_valid"] is True
    wrong = response_format_check('{"a": "one"}', JSON_SCHEMA)
    assert wrong["json_valid"] is True and wrong["schema_valid"] is False
    assert "integer" in wrong["reason"]
    truncated = response_format_check('{"a": ', JSON_SCHEMA)
    assert truncated["json_valid"] is False and truncated["schema_valid"] is False
    prose = response_format_check('Here it is: {"a": 1}', JSON_SCHEMA)
    assert prose["json_valid"] is False


def test_it_requires_an_object_for_json_object_mode():
    assert response_format_check("[1, 2]", {"type": "json_object"})["schema_valid"] is False
    assert response_format_check('{"b": 1}', {"type": "json_object"})["schema_valid"] is True


def test_it_does_not_blame_the_output_for_an_invalid_schema():
    bad = {"type": "json_schema", "json_schema": {"schema": {"type": "no-such-type"}}}
    res = response_format_check('{"a": 1}', bad)
    assert res["json_valid"] is True and res["schema_valid"] is None
    assert "invalid schema" in res["reason"]


def test_it_ignores_non_json_response_formats():
    assert response_format_check("hello", {"type": "text"})["json_valid"] is None
    assert response_format_check("hello", None)["json_valid"] is None


def test_it_accepts_tool_calls_in_the_supported_shapes():
    tools = [WEATHER]
    shapes = [
        '{"name": "get_weather", "arguments": {"city": "Oslo"}}',
        '{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}',
        '[{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_weather", "arguments": {"city": "Rome"}}]',
        '{"tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]}',
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
    ]
    for text in shapes:
        assert tool_call_check(text, tools) == {"tool_valid": True, "reason": None}, text
    bare_tools = [WEATHER["function"]]
    assert tool_call_check(shapes[0], bare_tools)["tool_valid"] is True


def test_it_rejects_bad_tool_calls_with_a_reason():
    tools = [WEATHER]
    cases = {
        "It is sunny in Oslo.": "not a tool call",
        '{"name": "get_time", "arguments": {}}': "unknown tool",
        '{"name": "get_weather", "arguments": {"town": "Oslo"}}': "arguments of 'get_weather'",
        '{"name": "get_weather", "arguments": "{city: Oslo}"}': "not JSON",
        "<tool_call>{bad json}</tool_call>": "not a tool call",
    }
    for text, reason in cases.items():
        res = tool_call_check(text, tools)
        assert res["tool_valid"] is False, text
        assert reason in res["reason"], (text, res["reason"])
    assert tool_call_check("anything", None)["tool_valid"] is None


def _json_row(**kw):
    return request_row(**({"response_format": JSON_SCHEMA, "output_text": '{"a": 1}'} | kw))


def test_it_flags_validity_per_request_and_fails_failed_requests():
    rows = frame(
        _json_row(request_id="ok"),
        _json_row(request_id="bad", output_text='{"a": "x"}'),
        _json_row(request_id="failed", error="timeout"),
        request_row(request_id="plain"),
        request_row(
            request_id="tool", tools=[WEATHER], output_text='{"name": "get_weather", "arguments": {}}'
        ),
    )
    flags = quality_flags(rows)
    assert flags["json_valid"].tolist() == [True, True, False, pd.NA, pd.NA]
    assert flags["schema_valid"].tolist() == [True, False, False, pd.NA, pd.NA]
    assert flags["tool_valid"].tolist() == [pd.NA, pd.NA, pd.NA, pd.NA, False]
    assert flags["output_valid"].tolist() == [True, False, False, True, False]
    assert flags["quality_reason"].iloc[2] == "request failed"


def test_it_reports_the_first_divergence_against_the_baseline():
    rows = frame(
        request_row(request_id="same", output_token_ids=[1, 2, 3]),
        request_row(request_id="differs", output_token_ids=[1, 2, 3]),
        request_row(request_id="shorter", output_token_ids=[1, 2, 3]),
        request_row(arm="spec", is_baseline=False, request_id="same", output_token_ids=[1, 2, 3]),
        request_row(arm="spec", is_baseline=False, request_id="differs", output_token_ids=[1, 2, 4]),
        request_row(arm="spec", is_baseline=False, request_id="shorter", output_token_ids=[1, 2]),
        request_row(arm="spec", is_baseline=False, request_id="orphan", output_token_ids=[1]),
    )
    em = exact_match(rows, baseline_arm="base")
    assert em["exact_match"].tolist() == [pd.NA, pd.NA, pd.NA, True, False, False, pd.NA]
    assert em["first_divergence"].tolist() == [pd.NA, pd.NA, pd.NA, pd.NA, 2, 2, pd.NA]


def test_it_pairs_exact_match_on_load_and_repeat():
    rows = frame(
        request_row(repeat=0, output_token_ids=[1, 2]),
        request_row(repeat=1, output_token_ids=[9, 9]),
        request_row(arm="spec", is_baseline=False, repeat=1, output_token_ids=[9, 9]),
        request_row(arm="spec", is_baseline=False, repeat=0, load="2x", output_token_ids=[1, 2]),
    )
    em = exact_match(rows, baseline_arm="base")
    # repeat 1 matches repeat 1; the 2x row has no 2x baseline
    assert em["exact_match"].tolist()[2:] == [True, pd.NA]


def test_it_compares_texts_when_an_arm_returned_no_token_ids():
    # Old behaviour: two empty id lists compared equal, so different texts "matched exactly".
    rows = frame(
        request_row(request_id="a", output_token_ids=[], output_text="The answer is 4."),
        request_row(request_id="b", output_token_ids=[], output_text="same"),
        request_row(arm="spec", is_baseline=False, request_id="a", output_token_ids=[], output_text="It is 5."),
        request_row(arm="spec", is_baseline=False, request_id="b", output_token_ids=[], output_text="same"),
    )
    em = exact_match(rows, baseline_arm="base")
    assert em["exact_match"].tolist()[2:] == [False, True]
    assert em["exact_match_basis"].tolist()[2:] == ["text", "text"]


def test_it_does_not_compare_outputs_of_failed_requests():
    rows = frame(
        request_row(request_id="a"),
        request_row(arm="spec", is_baseline=False, request_id="a", error="engine crashed", finish_s=float("nan")),
    )
    assert exact_match(rows, baseline_arm="base")["exact_match"].tolist() == [pd.NA, pd.NA]


def test_it_counts_regressions_and_improvements_completely():
    rows = []
    for i in range(8):
        base_ok, cand_ok = (i != 0), (i not in (1, 2))  # r0 improves, r1 and r2 regress
        no_ids = {"output_token_ids": []}  # compared as text
        rows.append(_json_row(request_id=f"r{i}", run_id=1) | no_ids | {"output_text": '{"a": 1}' if base_ok else "no"})
        rows.append(
            _json_row(request_id=f"r{i}", run_id=2, arm="spec", is_baseline=False)
            | no_ids
            | {"output_text": '{"a": 1}' if cand_ok else "no"}
        )
    rows = frame(*rows)
    flags = pd.concat([rows, quality_flags(rows), exact_match(rows, baseline_arm="base")], axis=1)
    counts = quality_counts(flags, baseline_arm="base").set_index("check")
    row = counts.loc["json_valid"]
    assert (row["n_applicable"], row["base_valid"], row["cand_valid"]) == (8, 7, 6)
    assert (row["regressions"], row["improvements"]) == (2, 1)
    assert row["mcnemar_p"] == 1.0  # 2 vs 1 discordant pairs: no evidence either way
    assert counts.loc["exact_match", "regressions"] == 3  # r0, r1, r2 differ in text
    assert row["baseline_flip_rate"] is None  # one repeat: the baseline's own flips are unknown


def _broken_candidate_experiment(n=6, broken=("r1", "r3")):
    rows = []
    for i in range(n):
        rid = f"r{i}"
        rows.append(_json_row(request_id=rid, run_id=1, result_id=100 + i))
        text = '{"a": ' if rid in broken else '{"a": 1}'
        rows.append(
            _json_row(request_id=rid, run_id=2, arm="spec", is_baseline=False, result_id=200 + i)
            | {"output_text": text}
        )
    return frame(*rows)


def test_it_lists_regressions_of_a_broken_candidate():
    rows = _broken_candidate_experiment()
    flags = pd.concat([rows, quality_flags(rows)], axis=1)
    reg = quality_regressions(flags, baseline_arm="base")
    assert reg["request_id"].tolist() == ["r1", "r3"]
    assert reg["checks"].tolist() == ["json_valid,schema_valid", "json_valid,schema_valid"]
    assert reg["baseline_result_id"].tolist() == [101, 103]
    assert reg["candidate_result_id"].tolist() == [201, 203]
    assert reg["candidate_run_id"].tolist() == [2, 2]
    assert (reg["reason"] == "output is not valid JSON").all()


def test_it_does_not_count_a_shared_failure_as_a_regression():
    rows = _broken_candidate_experiment(broken=("r1",))
    rows.loc[(rows["arm"] == "base") & (rows["request_id"] == "r1"), "output_text"] = "oops"
    flags = pd.concat([rows, quality_flags(rows)], axis=1)
    assert quality_regressions(flags, baseline_arm="base").empty


def test_it_computes_rates_over_applicable_requests():
    rows = pd.concat(
        [
            _broken_candidate_experiment(),
            frame(request_row(arm="spec", is_baseline=False, request_id="plain")),
        ],
        ignore_index=True,
    )
    flags = pd.concat([rows, quality_flags(rows), exact_match(rows, baseline_arm="base")], axis=1)
    rates = quality_rates(flags, by=["arm"]).set_index("arm")
    assert rates.loc["spec", "n_json_valid"] == 6  # the plain request has no response_format
    assert rates.loc["spec", "json_valid_rate"] == 4 / 6
    assert np.isnan(rates.loc["spec", "tool_valid_rate"])
    assert rates.loc["spec", "output_valid_rate"] == 5 / 7  # 4 valid JSON + the plain request


def test_it_uses_flags_stored_with_the_results():
    rows = frame(
        _json_row(request_id="stored-bad", json_valid=True, schema_valid=False, tool_call_valid=None),
        _json_row(request_id="stored-ok", output_text="not json", json_valid=True, schema_valid=True)
        | {"tool_call_valid": None},
        _json_row(
            request_id="failed", error="timeout", json_valid=True, schema_valid=True, tool_call_valid=None
        ),
        request_row(request_id="plain", json_valid=None, schema_valid=None, tool_call_valid=None),
    )
    flags = quality_flags(rows)
    # stored flags win over the text: no second validation of every output
    assert flags["schema_valid"].tolist() == [False, True, False, pd.NA]
    assert flags["output_valid"].tolist() == [False, True, False, True]
    # the failing row is re-checked for its reason ('{"a": 1}' validates, so the stored verdict stands)
    assert flags["quality_reason"].tolist() == ["stored flag: invalid", None, "request failed", None]
    recomputed = quality_flags(rows, use_stored=False)
    assert recomputed["schema_valid"].tolist() == [True, False, False, pd.NA]
