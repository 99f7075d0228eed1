"""python manage.py import_trace: the trace id and a summary, or the errors and exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command

from console.traces.models import Trace

pytestmark = pytest.mark.django_db
BAD = Path(__file__).parent / "bad"


def test_it_imports_and_prints_the_trace_id_and_summary(capsys, shared_data):
    call_command(
        "import_trace",
        str(shared_data / "traces/mooncake/conversation_trace.jsonl"),
        "--pair-with",
        str(shared_data / "prompts/sharegpt/ShareGPT_V3_filtered_500.json"),
        "--holdout",
        "0.25",
        "--seed",
        "4",
        "--name",
        "mooncake",
    )
    out = capsys.readouterr().out.splitlines()
    trace = Trace.objects.get()
    assert out[0] == str(trace.pk)
    assert "12031 requests" in "\n".join(out) and "PAIRED" in "\n".join(out)
    assert trace.holdout_fraction == 0.25 and trace.seed == 4 and trace.name == "mooncake"


def test_it_pairs_with_a_stored_trace_id(capsys, shared_data):
    call_command(
        "import_trace",
        str(shared_data / "prompts/gsm8k/test.first300_filtered.jsonl"),
        "--arrival",
        "gamma:2:3",
    )
    pool_id = int(capsys.readouterr().out.splitlines()[0])
    call_command(
        "import_trace",
        str(shared_data / "traces/burstgpt/BurstGPT_1.first400.csv"),
        "--pair-with",
        str(pool_id),
    )
    paired = Trace.objects.exclude(pk=pool_id).get()
    assert set(paired.requests.values_list("task", flat=True)) == {"math"}
    assert Trace.objects.get(pk=pool_id).arrival_spec == "gamma:2:3"


def test_it_exits_2_with_the_error_list(capsys):
    with pytest.raises(SystemExit) as exit_info:
        call_command("import_trace", str(BAD / "duplicate_ids.jsonl"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "duplicate_ids.jsonl:3: id: duplicate id 'r1'" in err and "nothing was stored" in err
    assert not Trace.objects.exists()
