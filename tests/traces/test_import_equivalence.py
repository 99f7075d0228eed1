"""The fast import path stores exactly what the importer stored before it existed.

``import_golden.json`` was written by the importer before the fast path (see import_cases.py): for
every format (native with every field, gzip, generated arrivals, sessions, OpenAI logs, Azure and
BurstGPT paired, ShareGPT, Spec-Bench, HumanEval, GSM8K, BFCL, JSONSchemaBench, a prompt list, a
mapped set) and for every bad file, each stored column of each request, the trace's content hash,
summary, warnings and metadata, or each error line, must match. Postgres writes with COPY, other
databases with bulk_create: both paths are checked against the same golden file, and against each
other on the database the tests run on.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection

from console.traces import services
from console.traces.models import Trace
from tests.traces.import_cases import CASES, GOLDEN, fingerprint, stored_rows

pytestmark = pytest.mark.django_db

GOLDEN_DATA = json.loads(GOLDEN.read_text(encoding="utf-8"))


def test_every_case_has_a_golden_fingerprint():
    assert sorted(GOLDEN_DATA) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_import_stores_what_the_previous_importer_stored(name, engineer):
    got = fingerprint(name, engineer)
    expected = GOLDEN_DATA[name]
    # compared piece by piece first so a failure names what changed
    for key in ("errors", "content_sha256", "request_count", "summary", "warnings", "metadata", "first_row"):
        assert got.get(key) == expected.get(key), key
    assert got == expected


@pytest.mark.parametrize(
    "name",
    ["native_every_field", "native_poisson_arrivals", "openai_log", "sharegpt_all_turns", "azure_paired"],
)
def test_the_copy_path_and_the_bulk_create_path_store_the_same_rows(name, engineer, monkeypatch):
    fast = fingerprint(name, engineer)
    fast_rows = stored_rows(Trace.objects.get(name=name))
    Trace.objects.all().delete()
    monkeypatch.setattr(services, "_use_copy", lambda: False)
    slow = fingerprint(name, engineer)
    assert stored_rows(Trace.objects.get(name=name)) == fast_rows
    assert slow == fast
    if connection.vendor == "postgresql":
        assert fast == GOLDEN_DATA[name]


def test_a_bad_line_after_many_good_ones_leaves_nothing_on_either_path(engineer, monkeypatch):
    import io

    from console.traces.errors import TraceImportError
    from console.traces.models import TraceRequest

    good = "".join(
        json.dumps({"id": f"r{i}", "arrival_s": i, "prompt": "x\ty\\z", "max_tokens": 4}) + "\n"
        for i in range(3000)
    )
    content = (good + '{"id": "r5", "arrival_s": 1, "prompt": "x", "max_tokens": 4}\n').encode()
    for copy in (True, False) if connection.vendor == "postgresql" else (False,):  # COPY is Postgres's
        monkeypatch.setattr(services, "_use_copy", lambda copy=copy: copy)
        with pytest.raises(TraceImportError) as caught:
            services.trace_import(
                file=io.BytesIO(content), name="t", uploaded_by=engineer, filename="t.jsonl"
            )
        assert caught.value.lines() == [
            "t.jsonl:3001: id: duplicate id 'r5' (ids must be unique within a trace)"
        ]
        assert Trace.objects.count() == 0 and TraceRequest.objects.count() == 0
