"""Inputs a live probe turned into 500s (issue 24, finding 3): gamma arrival parameters whose
process divides by zero, and a lone UTF-16 surrogate in a trace line. Each must be a 400 (or a
form error) that names the option or the line, with nothing stored."""

from __future__ import annotations

import io
import json
from itertools import islice

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from console.traces.arrivals import ArrivalSpecError, arrival_spec_parse, arrivals_generate
from console.traces.errors import TraceImportError
from console.traces.models import Trace, TraceRequest
from console.traces.services import trace_import

pytestmark = pytest.mark.django_db
DEGENERATE = ["gamma:1:1e308", "gamma:1:1e-200", "gamma:1e-320:1", "gamma:1e308:0.001", "poisson:1e-320"]
ROWS = [{"id": f"r{i}", "arrival_s": i, "prompt": f"p{i}", "max_tokens": 8} for i in range(3)]


def _native(rows) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


@pytest.mark.parametrize("spec", DEGENERATE)
def test_it_refuses_arrival_parameters_whose_process_is_not_finite_and_positive(spec):
    """Finding 3: gamma:1:1e308 and gamma:1:1e-200 divided by zero when arrivals were drawn."""
    with pytest.raises(ArrivalSpecError, match="between"):
        arrival_spec_parse(spec)


@pytest.mark.parametrize("spec", ["gamma:2:3", "gamma:0.001:10", "gamma:1000000:0.001", "poisson:0.000001"])
def test_it_draws_finite_positive_gaps_at_the_edges_it_accepts(spec):
    """Finding 3: every accepted spec gives finite, increasing arrivals."""
    times = list(islice(arrivals_generate(arrival_spec_parse(spec), seed=1), 2000))
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert all(t == t and t != float("inf") for t in times) and min(gaps) >= 0 and max(gaps) > 0


@pytest.mark.parametrize("spec", DEGENERATE[:2])
def test_it_answers_a_degenerate_arrival_process_with_a_400_naming_the_option(
    client, engineer, api_token_for, spec
):
    """Finding 3: the API answered 500 (ZeroDivisionError in traces/arrivals.py)."""
    upload = SimpleUploadedFile("t.jsonl", _native(ROWS))
    response = client.post("/api/traces", {"file": upload, "arrival": spec}, **api_token_for(engineer))
    assert response.status_code == 400, response.content
    assert "arrival" in response.content.decode() and spec in response.json()["error"]
    assert not Trace.objects.exists()


def test_it_shows_a_degenerate_arrival_process_as_a_form_error(engineer_client):
    """Finding 3: the upload page, the same."""
    response = engineer_client.post(
        "/traces/upload/",
        {
            "file": SimpleUploadedFile("t.jsonl", _native(ROWS)),
            "arrival": "gamma:1:1e-200",
            "holdout_fraction": "0.3",
            "seed": "0",
            "default_max_tokens": "64",
        },
    )
    assert response.status_code in (200, 400)
    assert "gamma:1:1e-200" in response.content.decode() and not Trace.objects.exists()


SURROGATE_LINE = (
    b'{"id": "s", "arrival_s": 1, "prompt": "hi", "max_tokens": 8, "metadata": {"note": "\\ud800"}}\n'
)


@pytest.mark.parametrize(
    "line",
    [
        SURROGATE_LINE,
        b'{"id": "s", "arrival_s": 1, "prompt": "lone \\udfff low", "max_tokens": 8}\n',
        b'{"id": "s\\ud83d", "arrival_s": 1, "prompt": "x", "max_tokens": 8}\n',
    ],
)
def test_it_refuses_a_lone_surrogate_with_the_line_number(engineer, line):
    """Finding 3: a lone surrogate raised UnicodeEncodeError (a 500) while hashing the request."""
    content = _native(ROWS[:1]) + line
    with pytest.raises(TraceImportError) as info:
        trace_import(
            file=io.BytesIO(content),
            name="t",
            uploaded_by=engineer,
            filename="s.jsonl",
            source_format="native",
        )
    assert [e.line for e in info.value.errors] == [2]
    assert "surrogate" in info.value.errors[0].message
    assert not TraceRequest.objects.exists()


def test_it_keeps_a_surrogate_pair_that_makes_one_character(engineer):
    """Finding 3: an escaped pair (an emoji) is one valid character, not a lone surrogate."""
    line = b'{"id": "e", "arrival_s": 0, "prompt": "\\ud83d\\ude00", "max_tokens": 8}\n'
    result = trace_import(
        file=io.BytesIO(line), name="t", uploaded_by=engineer, filename="e.jsonl", source_format="native"
    )
    assert TraceRequest.objects.get(trace=result.trace).prompt == "\U0001f600"


def test_it_answers_a_lone_surrogate_with_a_400_through_the_api(client, engineer, api_token_for):
    """Finding 3: the API, the same, with the line in the details."""
    upload = SimpleUploadedFile("s.jsonl", _native(ROWS[:1]) + SURROGATE_LINE)
    response = client.post("/api/traces", {"file": upload}, **api_token_for(engineer))
    assert response.status_code == 400, response.content
    error = response.json()["details"]["errors"][0]
    assert error["line"] == 2 and "surrogate" in error["message"]
    assert not Trace.objects.exists()
