"""DataFrames and numpy values as JSON-safe records (NaN/inf -> null)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from console.jsonutil import json_safe


def records(frame: pd.DataFrame) -> list[dict]:
    """Rows as JSON-safe dicts, converted a column at a time."""
    columns: dict[str, list] = {}
    for name in frame.columns:
        col = frame[name]
        if isinstance(col.dtype, np.dtype) and col.dtype.kind == "f":
            arr = col.to_numpy()
            values = arr.astype(object)
            values[~np.isfinite(arr)] = None
            columns[str(name)] = values.tolist()
        else:
            columns[str(name)] = [json_safe(v) for v in col.astype(object).tolist()]
    names = list(columns)
    return [dict(zip(names, row, strict=True)) for row in zip(*columns.values(), strict=True)]
