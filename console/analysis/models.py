"""What analysis stores: an experiment's computed comparison (what runs measured lives in
``console.results``)."""

from __future__ import annotations

from django.db import models

from console.experiments.models import Experiment


class ComparisonCache(models.Model):
    experiment = models.OneToOneField(Experiment, on_delete=models.CASCADE, related_name="comparison_cache")
    key = models.CharField(
        max_length=64, help_text="hash of the finished runs and parameters it was computed from"
    )
    data = models.JSONField(default=dict, help_text="the comparison; empty until first computed")
    computed_at = models.DateTimeField(auto_now=True)
    progress = models.JSONField(
        default=dict,
        blank=True,
        help_text="the computation under way: {key, stage, step, steps, started_at}; empty when none",
    )
