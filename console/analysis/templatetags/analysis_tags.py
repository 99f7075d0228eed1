"""Template tags of the analysis app.

``experiment_fit`` renders the fit-assessment block of the experiment page
(``templates/experiments/detail.html``): the experiments app sits below analysis and cannot ask
for the assessment itself, so the page loads this tag and analysis fills the block in.
"""

from __future__ import annotations

import json
from typing import Any

from django import template

from console.analysis.fit_assessment import numbers_lines
from console.analysis.selectors import experiment_fit_assessment
from console.experiments.models import Experiment

register = template.Library()


@register.inclusion_tag("analysis/_experiment_fit.html")
def experiment_fit(experiment: Experiment) -> dict[str, Any]:
    """The experiment's fit assessment, each condition's numbers as short lines. Not in the htmx
    refresh: it reads the trace once, and changes only when a baseline run ends."""
    fit = experiment_fit_assessment(experiment=experiment)
    for condition in fit["conditions"]:
        condition["lines"] = numbers_lines(condition["name"], condition["numbers"])
    return {"fit": fit}


@register.filter
def json_text(value: Any) -> str:
    """A config (or any JSON value) as indented JSON with sorted keys: what the engine was given,
    in the form it is written in, never a Python repr."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
