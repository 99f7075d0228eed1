"""The shared JSON helpers pin the bytes every caller hashes or stores: a config hash, a router
document's hash and a decision bundle's canonical text must not move when the helpers do."""

from __future__ import annotations

import datetime
import json

import numpy as np
import pandas as pd
import pytest

from console.decisions import archive
from console.experiments import matrix
from console.jsonutil import canonical_json, json_safe
from console.policies import router as policy_router


def _value():
    return {
        "f": [1.5, float("nan"), float("inf"), np.float32(0.1), np.float64(2.0)],
        "i": np.int64(3),
        "b": np.bool_(True),
        "s": np.str_("x"),
        "t": (1, "é"),
        1: None,
        "n": {"k": -0.0, "x": 1e-20, "y": 0.1 + 0.2, "d": np.datetime64("2020-01-02")},
    }


def test_it_makes_numpy_and_non_finite_values_plain_json():
    out = json_safe(_value())
    assert out == {
        "f": [1.5, None, None, 0.10000000149011612, 2.0],
        "i": 3,
        "b": True,
        "s": "x",
        "t": [1, "é"],
        "1": None,
        "n": {"k": -0.0, "x": 1e-20, "y": 0.30000000000000004, "d": datetime.date(2020, 1, 2)},
    }
    assert [type(x) for x in out["f"]] == [float, type(None), type(None), float, float]
    assert (type(out["i"]), type(out["b"]), type(out["s"])) == (int, bool, str)


def test_it_turns_arrays_and_pandas_missing_values_into_json():
    assert json_safe({"a": np.array([1.0, np.nan]), "na": pd.NA, "nat": pd.NaT}) == {
        "a": [1.0, None],
        "na": None,
        "nat": None,
    }


def test_the_plain_canonical_form_is_pinned():
    text = '{"1":null,"b":true,"f":[1.5,null,null,0.10000000149011612,2.0],"i":3,"n":{"d":"2020-01-02","k":-0.0,"x":1e-20,"y":0.30000000000000004},"s":"x","t":[1,"é"]}'
    value = json_safe(_value())
    value["n"]["d"] = str(value["n"]["d"])
    assert canonical_json(value) == text
    # the policy and experiment modules hash with the same function
    assert policy_router.canonical_json(value) == matrix.canonical_json(value) == text
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_the_archive_canonical_form_rounds_and_spells_non_finite_floats():
    value = {"a": [0.1 + 0.2, float("nan"), float("-inf"), np.float32(0.1), 3, True, None], "é": -0.0}
    assert archive.canonical_json(value) == '{"a":[0.3,"NaN","-Infinity",0.10000000149,3,true,null],"é":0.0}'
    # the bundle text is the shared canonical form of the normalised value
    assert archive.canonical_json(value) == canonical_json(json.loads(archive.canonical_json(value)))


def test_stored_hashes_do_not_move():
    assert (
        matrix.config_hash(
            engine="hf",
            target_model="smollm2-135m",
            engine_args={"dtype": "float32"},
            speculative_config={"method": "ngram", "num_speculative_tokens": 4},
        )
        == "ae5a99639568c457839f27a49d0bea7f542a616b44721fbeec05af292dfe3f9a"
    )
    document = {
        "rules": [
            {
                "when": {"task": "code"},
                "arm": "ngram",
                "speculative_config": {"method": "ngram", "num_speculative_tokens": 4},
            }
        ],
        "x": 0.30000000000000004,
    }
    assert policy_router.document_sha256(document) == "a68c2600c4e3c3296f133c7ffdd3216942e50ea5847ce0a1af3adb79a9ccf824"


def test_the_in_memory_form_escapes_non_ascii_and_spells_nan_as_json_dumps_does():
    # grading's call-match and cache keys: json.dumps's own defaults, sorted and without spaces
    value = {"é": [float("nan"), float("-inf"), 0.1], "a": "x\u2028"}
    text = canonical_json(value, ensure_ascii=True, allow_nan=True)
    assert text == '{"a":"x\\u2028","\\u00e9":[NaN,-Infinity,0.1]}'
    assert text == json.dumps(value, sort_keys=True, separators=(",", ":"))
    with pytest.raises(TypeError):
        canonical_json({"s": {1, 2}})
