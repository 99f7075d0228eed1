"""The traffic classes come from one list (console.traces.models.TRAFFIC_CLASSES): what an
experiment accepts, offers and validates is exactly that list."""

from __future__ import annotations

from collections import defaultdict

from console.experiments import services
from console.experiments.forms import ExperimentForm
from console.traces.models import TRAFFIC_CLASSES


def test_it_accepts_deadlines_for_every_traffic_class_and_names_them_on_an_unknown_one():
    errors: dict[str, list[str]] = defaultdict(list)
    clean = services._deadlines_clean({c: {"e2e_s": 5} for c in TRAFFIC_CLASSES} | {"bulk": {"e2e_s": 1}}, errors)
    assert sorted(clean) == sorted(TRAFFIC_CLASSES)
    assert errors["deadlines"] == ["unknown traffic class 'bulk'; use interactive or batch"]


def test_the_form_offers_the_same_classes():
    assert [c for c, _ in ExperimentForm.base_fields["promised_class"].choices] == list(TRAFFIC_CLASSES)
