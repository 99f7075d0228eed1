"""Checks of the packed result arrays that run the same on PostgreSQL (pytest's database) and on
SQLite (``python -m tests.analysis.packed_checks`` in a process of its own, see
``test_packed_arrays.py``). Each check raises AssertionError on a difference."""

from __future__ import annotations

import json
import math
import struct
import sys

# Values a worker can produce, and the edges of each dtype.
FLOATS = [
    0.0,
    -0.0,
    0.1,
    1 / 3,
    12345.678901234567,
    5e-324,
    1e-300,
    1.7976931348623157e308,
    math.inf,
    -math.inf,
    math.nan,
]
INTS = [0, 1, -1, 151643, 2**31 - 1, -(2**31)]


def _bits(values: list) -> list:
    """Floats by bit pattern: -0.0 differs from 0.0 and NaN equals itself."""
    return [struct.pack("<d", v) for v in values]


def _experiment():
    from tests.support.synthetic import experiment_synthesize

    return experiment_synthesize(n_requests=4, ks=(2,), loads="1x", repeats=1, name="packed")


def roundtrip_check() -> dict:
    """Store awkward arrays through the ORM, read them back through the ORM, ``values_list``
    and the bulk loader (``results_frames``): every value comes back bit for bit."""
    from django.core.exceptions import ValidationError
    from django.db import connection, transaction

    from console.analysis.selectors import experiment_finished_runs
    from console.results.models import RequestResult
    from console.results.selectors import results_frames

    experiment = _experiment()
    rows = list(RequestResult.objects.order_by("pk"))
    untouched = rows[3].output_token_ids
    stored = {
        rows[0].pk: {"chunk_times": FLOATS, "chunk_tokens": INTS, "output_token_ids": INTS[::-1]},
        rows[1].pk: {
            "chunk_times": [],
            "chunk_tokens": [],
            "output_token_ids": [],
            "drafted": [],
            "accepted": [],
        },
        rows[2].pk: {"drafted": [4] * 300, "accepted": list(range(5)) * 60, "chunk_times": [7.25] * 5000},
    }
    for pk, fields in stored.items():
        RequestResult.objects.filter(pk=pk).update(**fields)
    # an out-of-range integer is refused with the field's name, and nothing is written
    try:
        with transaction.atomic():
            RequestResult.objects.filter(pk=rows[3].pk).update(output_token_ids=[2**31])
    except ValidationError as exc:
        refused = str(exc)
    else:
        raise AssertionError("an out-of-range token id was stored")
    assert "output_token_ids" in refused and "32-bit" in refused, refused
    assert RequestResult.objects.get(pk=rows[3].pk).output_token_ids == untouched

    by_pk = {r.pk: r for r in RequestResult.objects.filter(pk__in=stored)}
    listed = {
        pk: dict(
            zip(["chunk_times", "chunk_tokens", "output_token_ids", "drafted", "accepted"], rest, strict=True)
        )
        for pk, *rest in RequestResult.objects.filter(pk__in=stored).values_list(
            "pk", "chunk_times", "chunk_tokens", "output_token_ids", "drafted", "accepted"
        )
    }
    requests, _ = results_frames(runs=experiment_finished_runs(experiment=experiment))
    framed = requests.set_index("result_id")
    for pk, fields in stored.items():
        for name, want in fields.items():
            for source, got in (
                ("model", getattr(by_pk[pk], name)),
                ("values_list", listed[pk][name]),
                ("results_frames", framed.at[pk, name].tolist()),
            ):
                assert isinstance(got, list), (source, name, type(got))
                if name == "chunk_times":
                    assert _bits(got) == _bits(want), (source, name, got[:12])
                    assert all(type(v) is float for v in got), (source, name)
                else:
                    assert got == want, (source, name, got[:12])
                    assert all(type(v) is int for v in got), (source, name)
    # rows nobody touched read the same through both paths
    for result in RequestResult.objects.exclude(pk__in=stored):
        for name in ("chunk_times", "chunk_tokens", "output_token_ids", "drafted", "accepted"):
            cell = framed.at[result.pk, name]
            assert cell.ndim == 1 and not cell.flags.writeable, (result.pk, name)
            assert cell.tolist() == getattr(result, name), (result.pk, name)
    return {"vendor": connection.vendor, "rows": len(requests), "refused": refused}


def _frames_identical(got, want) -> None:
    """Two request frames hold the same columns, dtypes and values (floats by bit pattern)."""
    import numpy as np

    assert list(got.columns) == list(want.columns), (list(got.columns), list(want.columns))
    assert got.dtypes.equals(want.dtypes), (got.dtypes, want.dtypes)
    assert len(got) == len(want), (len(got), len(want))
    for name in want.columns:
        for a, b in zip(got[name].tolist(), want[name].tolist(), strict=True):
            if isinstance(b, np.ndarray):
                assert isinstance(a, np.ndarray) and a.dtype == b.dtype and not a.flags.writeable, name
                assert a.tobytes() == b.tobytes(), (name, a[:8], b[:8])
            elif isinstance(b, float):
                assert isinstance(a, float) and _bits([a]) == _bits([b]), (name, a, b)
            else:
                assert type(a) is type(b) and a == b, (name, a, b)


def pack_check() -> dict:
    """Each run's rows packed into one value (``RunResultsPack``) load exactly as the rows do:
    every run packed, some packed, a stale pack (its run's rows replaced) and a corrupt one
    (both ignored: the rows are read instead)."""
    from django.db import connection

    from console.analysis.selectors import experiment_finished_runs
    from console.results.models import RequestResult, RunResultsPack
    from console.results.selectors import results_frames
    from console.results.services import results_pack_store, results_packs_store

    experiment = _experiment()
    rows = list(RequestResult.objects.order_by("pk"))
    RequestResult.objects.filter(pk=rows[0].pk).update(
        chunk_times=FLOATS, chunk_tokens=INTS, output_token_ids=INTS[::-1], output_text="é\u2028\"x\"", error="e"
    )
    RequestResult.objects.filter(pk=rows[1].pk).update(
        spec_totals={"drafted": 3, "accepted": [1, None]}, json_valid=True, schema_valid=False
    )
    runs = experiment_finished_runs(experiment=experiment)
    want, _ = results_frames(runs=runs)
    assert not RunResultsPack.objects.exists()
    assert results_packs_store(experiment=experiment) == len(runs) >= 2
    assert results_packs_store(experiment=experiment) == 0  # all current
    got, _ = results_frames(runs=runs)
    _frames_identical(got, want)
    # some runs packed, the others read row by row: the same frame, in run order
    RunResultsPack.objects.filter(run_id=runs[0].pk).delete()
    got, _ = results_frames(runs=runs)
    _frames_identical(got, want)
    # a run whose rows were replaced after packing: its old pack no longer counts
    results_pack_store(run_id=runs[0].pk)
    victim = RequestResult.objects.filter(run_id=runs[0].pk).order_by("pk").first()
    victim.delete()
    victim.pk = None
    victim.output_text = "stored again"
    victim.save()  # the same number of rows, a new highest id
    fresh, _ = results_frames(runs=runs)
    assert "stored again" in fresh["output_text"].tolist()
    assert len(fresh) == len(want) and fresh["result_id"].max() == victim.pk
    # a corrupt pack is read past
    RunResultsPack.objects.filter(run_id=runs[1].pk).update(data=b"junk")
    got, _ = results_frames(runs=runs)
    _frames_identical(got, fresh)
    return {"vendor": connection.vendor, "rows": len(want)}


def migration_check() -> dict:
    """Migrate the analysis app back to its JSON columns (the reverse converts the packed
    arrays into them), write old-style JSON rows (a ``null`` where the store wrote a non-finite
    number, whole-valued floats in an integer list), migrate forward: every row converted."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from console.results.models import RequestResult

    experiment = _experiment()
    before = {
        r.pk: (r.chunk_times, r.chunk_tokens, r.output_token_ids, r.drafted, r.accepted)
        for r in RequestResult.objects.filter(run__experiment=experiment)
    }
    assert before and any(v[3] for v in before.values()), "the builder made no drafted steps"
    old, pks = [("analysis", "0002_requestresult_spec_totals")], sorted(before)
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("analysis")
    executor.migrate(old)
    try:
        Old = (
            MigrationExecutor(connection)
            .loader.project_state(old)
            .apps.get_model("analysis", "RequestResult")
        )
        reversed_rows = {
            r.pk: (r.chunk_times, r.chunk_tokens, r.output_token_ids, r.drafted, r.accepted)
            for r in Old.objects.filter(pk__in=pks)
        }
        assert reversed_rows == before, "the reverse migration changed values"
        Old.objects.filter(pk=pks[0]).update(
            chunk_times=[0.5, None, 1.25],
            chunk_tokens=[1.0, 2, 3.0],
            output_token_ids=[7, 8],
            drafted=[],
            accepted=[],
        )
        Old.objects.filter(pk=pks[1]).update(chunk_times=[], chunk_tokens=[], output_token_ids=[])
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(latest)
    after = {r.pk: r for r in RequestResult.objects.filter(pk__in=pks)}
    first = after[pks[0]]
    assert _bits(first.chunk_times) == _bits([0.5, math.nan, 1.25]), first.chunk_times
    assert first.chunk_tokens == [1, 2, 3] and first.output_token_ids == [7, 8], first.chunk_tokens
    assert after[pks[1]].chunk_times == [] and after[pks[1]].output_token_ids == []
    for pk in pks[2:]:
        r = after[pk]
        assert (r.chunk_times, r.chunk_tokens, r.output_token_ids, r.drafted, r.accepted) == before[pk], pk
    return {"vendor": connection.vendor, "rows": len(pks)}


def main() -> None:
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    assert connection.vendor == "sqlite", connection.vendor
    call_command("migrate", verbosity=0, interactive=False)
    out = {"roundtrip": roundtrip_check()}
    call_command("flush", verbosity=0, interactive=False)
    out["migration"] = migration_check()
    call_command("flush", verbosity=0, interactive=False)
    out["pack"] = pack_check()
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
