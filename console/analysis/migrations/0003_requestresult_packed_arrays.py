"""Result arrays from per-row JSON to packed bytes (``console.results.arrays``).

Adds a packed column beside each JSON one, converts every stored row (in batches, by primary
key), drops the JSON column and gives the packed one its name. Reversible: backwards, the JSON
columns come back and the packed values are converted into them.

Old JSON could hold ``null`` inside a float list (the store wrote non-finite numbers so): it
becomes NaN. An integer list holding whole-valued floats (``2.0``) is stored as the integers.
Anything else that is not a flat list of numbers stops the migration with the row's id.
"""

from __future__ import annotations

import math

import numpy as np
from django.db import migrations

import console.results.arrays

FIELDS = {
    "chunk_times": "float",
    "chunk_tokens": "int",
    "output_token_ids": "int",
    "drafted": "int",
    "accepted": "int",
}
HELP = {
    "chunk_times": "seconds from run start, one per visible chunk",
    "chunk_tokens": "tokens per chunk",
    "output_token_ids": "the output's token ids",
    "drafted": "draft tokens proposed per verification step",
    "accepted": "draft tokens accepted per verification step",
}
BATCH = 2000


def _coerce(value, kind: str, *, what: str, pk: int) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"RequestResult {pk}: {what} is {type(value).__name__}, not a list")
    try:
        fast = np.asarray(value)
    except (TypeError, ValueError, OverflowError):
        fast = None
    if fast is not None and fast.ndim == 1 and fast.dtype.kind in ("iu" if kind == "int" else "iuf"):
        return value  # the common case, checked in one pass: the field packs it
    out = []
    for v in value:
        if kind == "float":
            if v is None:
                out.append(math.nan)
            elif isinstance(v, int | float) and not isinstance(v, bool):
                out.append(float(v))
            else:
                raise ValueError(f"RequestResult {pk}: {what} holds {v!r}, not a number")
        else:
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"RequestResult {pk}: {what} holds {v!r}, not a whole number")
            out.append(v)
    return out


def _convert(apps, schema_editor, *, source: list[str], target: list[str], value) -> None:
    """Read ``source`` columns by primary key in batches, write ``value(name, kind, pk, stored)``
    into ``target`` with one executemany per batch (bulk_update's CASE statements are slow)."""
    Result = apps.get_model("analysis", "RequestResult")
    connection = schema_editor.connection
    quote = connection.ops.quote_name
    fields = [Result._meta.get_field(name) for name in target]
    sql = "UPDATE {} SET {} WHERE {} = %s".format(
        quote(Result._meta.db_table),
        ", ".join(f"{quote(f.column)} = %s" for f in fields),
        quote(Result._meta.pk.column),
    )
    last = 0
    while True:
        rows = list(Result.objects.filter(pk__gt=last).order_by("pk").values_list("pk", *source)[:BATCH])
        if not rows:
            return
        params = []
        for pk, *stored in rows:
            values = [
                value(name, kind, pk, v) for (name, kind), v in zip(FIELDS.items(), stored, strict=True)
            ]
            params.append(
                [*(f.get_db_prep_save(v, connection) for f, v in zip(fields, values, strict=True)), pk]
            )
        with connection.cursor() as cursor:
            cursor.executemany(sql, params)
        last = rows[-1][0]


def json_to_packed(apps, schema_editor):
    _convert(
        apps,
        schema_editor,
        source=list(FIELDS),
        target=[n + "_packed" for n in FIELDS],
        value=lambda name, kind, pk, v: _coerce(v, kind, what=name, pk=pk),
    )


def _json_value(name, kind, pk, value):
    if kind == "float":  # JSON has no NaN: null, as the store wrote it
        return [v if math.isfinite(v) else None for v in value]
    return value


def packed_to_json(apps, schema_editor):
    _convert(
        apps, schema_editor, source=[n + "_packed" for n in FIELDS], target=list(FIELDS), value=_json_value
    )


class Migration(migrations.Migration):
    dependencies = [("analysis", "0002_requestresult_spec_totals")]

    operations = [
        *[
            migrations.AddField(
                model_name="requestresult",
                name=name + "_packed",
                field=console.results.arrays.PackedArrayField(kind=kind, help_text=HELP[name]),
            )
            for name, kind in FIELDS.items()
        ],
        migrations.RunPython(json_to_packed, packed_to_json, elidable=False),
        *[migrations.RemoveField(model_name="requestresult", name=name) for name in FIELDS],
        *[
            migrations.RenameField(model_name="requestresult", old_name=name + "_packed", new_name=name)
            for name in FIELDS
        ],
    ]
