"""docs/ci.md's pipeline calls operations that exist, with bodies their schemas accept: every
`api METHOD PATH` line is in the OpenAPI document, and every JSON body it sends (shell variables
given sample ids) validates against the operation's input model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "ci.md"


def _script() -> str:
    text = DOC.read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1, "docs/ci.md has one bash block: the pipeline"
    return blocks[0]


def _sample(body: str) -> dict:
    return json.loads(re.sub(r"\$[a-z_]+", "1", body))


def _calls(script: str) -> list[tuple[str, str]]:
    calls = re.findall(r"\bapi (GET|POST|PATCH) \"?(/api/[^\s\"]+)", script)
    return [(m, re.sub(r"\$[a-z_]+", "{id}", p).split("?")[0]) for m, p in calls]


@pytest.mark.django_db
def test_every_operation_it_calls_is_in_the_document(client, engineer, api_token_for):
    document = client.get("/api/openapi.json", **api_token_for(engineer)).json()
    calls = _calls(_script())
    assert len(calls) >= 7
    missing = [f"{m} {p}" for m, p in calls if m.lower() not in document["paths"].get(p, {})]
    assert not missing, f"docs/ci.md calls operations the API does not have: {missing}"


def test_its_bodies_fit_the_operations_schemas():
    from console.decisions.api import DecisionCreateIn
    from console.experiments.api import ExperimentIn
    from console.policies.api import PolicyFitIn

    script = _script()
    [experiment] = re.findall(r"<<EOF[^\n]*\n(.*?)\nEOF", script, flags=re.S)
    ExperimentIn.model_validate(_sample(experiment))
    inline = [b.replace('\\"', '"') for b in re.findall(r'-d "(\{.*?\})"', script)]
    assert len(inline) == 2
    PolicyFitIn.model_validate(_sample(inline[0]))
    DecisionCreateIn.model_validate(_sample(inline[1]))
