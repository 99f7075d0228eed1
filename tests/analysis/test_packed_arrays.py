"""The packed per-request arrays (``console.results.arrays``): exact round trips and the data
migration from JSON, on PostgreSQL here and on SQLite in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from console.results.arrays import ArrayPackError, pack, unpack, unpack_many
from tests.analysis import packed_checks
from tests.conftest import ROOT


def test_it_unpacks_a_column_at_once_as_the_rows_did_one_by_one():
    rows = [[0.5, 1.5], [], [2.0], [np.nan, -0.0, 3.0]]
    flat, lens = unpack_many([pack(r, kind="float") for r in rows], kind="float")
    assert lens.tolist() == [2, 0, 1, 3]
    assert np.array_equal(flat, np.array([0.5, 1.5, 2.0, np.nan, -0.0, 3.0]), equal_nan=True)
    assert [unpack(pack(r, kind="int"), kind="int") for r in ([1, 2], [])] == [[1, 2], []]


@pytest.mark.parametrize(
    ("value", "kind", "message"),
    [
        ([[1, 2], [3, 4]], "int", "flat list"),
        (["1.5"], "float", "numbers only"),
        ([1.5], "int", "whole numbers"),
        ([1, None], "float", "numbers only"),
        ([2**40], "int", "32-bit"),
        ("12", "float", "list of numbers"),
        ({"a": 1}, "int", "list of numbers"),
    ],
)
def test_it_refuses_what_is_not_a_flat_list_of_numbers_naming_the_field(value, kind, message):
    with pytest.raises(ArrayPackError, match=message) as caught:
        pack(value, kind=kind, what="chunk_times")
    assert "chunk_times" in str(caught.value)


@pytest.mark.django_db
def test_it_round_trips_the_arrays_exactly_on_postgres():
    out = packed_checks.roundtrip_check()
    assert out["vendor"] == "postgresql" and out["rows"] == 8


@pytest.mark.django_db(transaction=True)
def test_it_converts_old_json_rows_and_back_on_postgres():
    out = packed_checks.migration_check()
    assert out["vendor"] == "postgresql" and out["rows"] == 8


@pytest.mark.django_db
def test_a_runs_packed_rows_load_exactly_as_its_rows_on_postgres():
    out = packed_checks.pack_check()
    assert out["vendor"] == "postgresql" and out["rows"] == 8


def test_it_round_trips_migrates_and_packs_on_sqlite(tmp_path):
    env = dict(
        os.environ, DATABASE_URL=f"sqlite:///{tmp_path / 'packed.sqlite3'}", SPECREVIEW_VAR_DIR=str(tmp_path)
    )
    result = subprocess.run(
        [sys.executable, "-m", "tests.analysis.packed_checks"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["roundtrip"]["vendor"] == out["migration"]["vendor"] == "sqlite"
    assert out["roundtrip"]["rows"] == out["migration"]["rows"] == out["pack"]["rows"] == 8
    assert out["pack"]["vendor"] == "sqlite"
