"""A run's rows as one value (``console.results.frame_pack``): exact round trips, and clear
refusals of whatever is not a pack. The database side is in ``packed_checks.pack_check``."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pandas as pd
import pytest

from console.results.frame_pack import (
    MAGIC,
    FramePackError,
    frame_pack,
    frame_unpack,
    frames_concat,
)

ARRAYS = {"times": "float", "ids": "int"}


def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "result_id": np.array([3, 1, 2], dtype=np.int64),
            "sent_s": [0.1, math.nan, -0.0],
            "times": pd.Series([np.array([math.inf, 5e-324]), np.array([]), np.array([1 / 3])], dtype=object),
            "ids": pd.Series(
                [np.array([2**31 - 1, -(2**31)]), np.array([7]), np.array([], dtype=np.int64)], dtype=object
            ),
            "text": ['é\u2028"q"', "", "\\n"],
            "error": [None, "boom", None],
            "spec": [{"a": [1, None]}, None, {}],
            "flag": [True, None, False],
        }
    )


def _same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert list(got.columns) == list(want.columns) and got.dtypes.equals(want.dtypes)
    for name in want.columns:
        for a, b in zip(got[name], want[name], strict=True):
            if isinstance(b, np.ndarray):
                assert a.dtype == np.dtype("float64" if name == "times" else "int64")
                assert np.array_equal(a, b.astype(a.dtype)) and not a.flags.writeable
            elif isinstance(b, float):
                assert np.float64(a).tobytes() == np.float64(b).tobytes(), (name, a, b)
            else:
                assert a == b and type(a) is type(b), (name, a, b)


def test_it_round_trips_every_kind_of_column_exactly():
    frame = _frame()
    blob = frame_pack(frame, arrays=ARRAYS)
    assert blob.startswith(MAGIC) and len(frame_unpack(blob)) == 3
    _same(frame_unpack(blob), frame)
    _same(frame_unpack(memoryview(blob)), frame)


def test_an_empty_frame_round_trips():
    empty = _frame().iloc[:0]
    got = frame_unpack(frame_pack(empty, arrays=ARRAYS))
    assert len(got) == 0 and list(got.columns) == list(empty.columns)


def test_frames_join_in_order_column_by_column():
    a, b = _frame(), _frame().iloc[1:].reset_index(drop=True)
    joined = frames_concat([frame_unpack(frame_pack(f, arrays=ARRAYS)) for f in (a, b)])
    _same(joined, pd.concat([a, b], ignore_index=True))


def test_it_refuses_an_integer_array_value_that_does_not_fit_32_bits():
    frame = _frame()
    frame.at[0, "ids"] = np.array([2**40])
    with pytest.raises(FramePackError, match="'ids'"):
        frame_pack(frame, arrays=ARRAYS)


def _header_changed(blob: bytes, change) -> bytes:
    """``blob`` with its JSON header passed through ``change`` (a function of the dict)."""
    start = len(MAGIC) + 8
    (size,) = struct.unpack("<Q", blob[len(MAGIC) : start])
    header = json.loads(blob[start : start + size])
    change(header)
    raw = json.dumps(header).encode()
    return MAGIC + struct.pack("<Q", len(raw)) + raw + blob[start + size :]


def _set_column(index: int, **fields):
    return lambda header: header["columns"][index].update(fields)


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda b: b"junk", "not a frame pack"),
        (lambda b: b[: len(MAGIC) + 4], "not a frame pack"),
        (lambda b: b[: len(MAGIC) + 20], "truncated in its header"),
        (lambda b: b[:-5], "truncated in its data"),
        (lambda b: _header_changed(b, lambda h: h.update(format=9)), "format 9"),
        (lambda b: _header_changed(b, _set_column(0, dtype="|O")), "unknown number type"),
        (lambda b: _header_changed(b, _set_column(4, kind="pickle")), "unknown kind"),
        (
            lambda b: _header_changed(b, _set_column(2, lens={"offset": 0, "nbytes": 8})),
            "lengths do not match",
        ),
        (lambda b: _header_changed(b, lambda h: h.update(n_rows=4)), "not 4"),
    ],
)
def test_it_refuses_what_is_not_a_whole_pack_clearly(mangle, message):
    blob = frame_pack(_frame(), arrays=ARRAYS)
    with pytest.raises(FramePackError, match=message):
        frame_unpack(mangle(blob))
