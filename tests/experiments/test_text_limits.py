"""What a user types into an experiment is bounded by its columns: a clear field error, never a 500."""

from __future__ import annotations

import pytest

from console.experiments.models import Experiment
from console.experiments.services import ExperimentInvalid, experiment_create
from tests.experiments.factories import trace_make

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def registered(openai_register):
    openai_register("http://127.0.0.1:9/v1")


def _create(**overrides):
    options = {
        "name": "ok",
        "engine": "openai",
        "target_model": "scripted",
        "baseline_engine_args": {"base_url": "http://127.0.0.1:9/v1", "endpoint": "completions"},
        "candidates": [{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}],
    } | overrides
    return experiment_create(trace=trace_make(name="t", prompts=["hello"]), **options)


@pytest.mark.parametrize(
    "overrides,field",
    [
        ({"name": "n" * 201}, "name"),
        ({"hardware_label": "h" * 201}, "hardware_label"),
        (
            {
                "candidates": [
                    {
                        "speculative_config": {"method": "ngram", "num_speculative_tokens": 2},
                        "label": "l" * 201,
                    }
                ]
            },
            "candidates",
        ),
    ],
)
def test_it_refuses_text_longer_than_its_column_with_a_field_error(overrides, field):
    with pytest.raises(ExperimentInvalid) as info:
        _create(**overrides)
    assert "at most" in " ".join(info.value.errors[field])
    assert not Experiment.objects.exists()


def test_it_accepts_text_at_the_column_length():
    assert _create(name="n" * 200, hardware_label="h" * 200).name == "n" * 200
