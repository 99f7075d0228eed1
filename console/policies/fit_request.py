"""A policy fit asked for by fields (the API's JSON body, the ``fit_policy`` command's options),
checked by the same form the page uses, so every door refuses the same input the same way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.accounts import teams
from console.experiments.models import Experiment
from console.policies import features as policy_features
from console.policies.forms import ALL_LOADS, PolicyFitForm
from console.policies.models import SlicePolicy
from console.policies.selectors import PolicyInputError
from console.policies.services import policy_fit


class PolicyFitRefused(ValueError):
    """The fields cannot be fitted: ``message`` says why, ``details`` maps a field to its errors."""

    def __init__(self, message: str, details: Mapping[str, list[str]] | None = None):
        super().__init__(message)
        self.message = message
        self.details = dict(details or {})


def _form_data(experiment: Experiment, form: PolicyFitForm, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The form's POST data: a field the caller left out takes the form's initial value."""
    data: dict[str, Any] = {"experiment": experiment.pk}
    for name in ("arms", "load", "metric", "features", "min_support", "ci"):
        value = fields.get(name, form.fields[name].initial)
        if name == "load" and value in ("all", None):  # "all" (or no level to choose): pooled
            value = ALL_LOADS
        data[name] = value
    return data


def policy_fit_checked(*, fields: Mapping[str, Any], created_by: Any) -> SlicePolicy:
    """Fit the policy ``fields`` ask for (``experiment`` by id; the rest as the fit form names
    them). Raises :class:`PolicyFitRefused` with the field errors, never a 500."""
    pk = fields.get("experiment")
    mine = teams.visible(Experiment.objects.select_related("trace"), created_by)  # another team's: "no experiment"
    experiment = mine.filter(pk=pk).first() if isinstance(pk, int) else None
    if experiment is None:
        raise PolicyFitRefused("field errors", {"experiment": [f"no experiment with id {fields.get('experiment')}"]})
    blank = PolicyFitForm(experiment=experiment)
    form = PolicyFitForm(_form_data(experiment, blank, fields), experiment=experiment)
    if not form.is_valid():
        raise PolicyFitRefused("field errors", {k: [str(m) for m in v] for k, v in form.errors.items()})
    try:
        return policy_fit(**form.service_kwargs(), created_by=created_by)
    except (policy_features.FeatureError, PolicyInputError) as exc:
        raise PolicyFitRefused(str(exc)) from None
