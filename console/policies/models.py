"""Slice policies: a first-match rule list over pre-execution features, fitted on the train split
of an experiment's trace and scored on its holdout split (see ``console.policies.fitting``)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from console.experiments.models import Experiment


class SlicePolicy(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.PROTECT, related_name="slice_policies")
    baseline_arm = models.CharField(max_length=200)
    arms = models.JSONField(
        default=list, help_text="candidate arm labels it chose among (a sweep: one per k)"
    )
    load = models.CharField(max_length=40, blank=True, help_text="load level label; empty = all pooled")
    metric = models.CharField(max_length=20, help_text="a key of console.policies.fit.METRICS")
    features = models.JSONField(default=list, help_text="allowlisted pre-execution features it could use")
    params = models.JSONField(default=dict, help_text="min_support, ci, stat, max_success_loss, max_features")
    rules = models.JSONField(
        default=list, help_text="the router document: schema, bucket edges and the first-match rule list"
    )
    rules_sha256 = models.CharField(
        max_length=64, db_index=True, help_text="sha256 of the canonical rules JSON"
    )
    fit_details = models.JSONField(
        default=dict, blank=True, help_text="per-rule train statistics and every slice the fit considered"
    )
    train_scores = models.JSONField(default=dict)
    holdout_scores = models.JSONField(default=dict)
    overfitting = models.JSONField(default=dict)
    source_runs = models.JSONField(default=list, help_text="ids of the finished runs it was fitted from")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name_plural = "slice policies"

    def __str__(self) -> str:
        return f"policy {self.pk} on {self.experiment_id} ({self.metric})"

    @property
    def is_overfit(self) -> bool:
        return bool((self.overfitting or {}).get("policy") or (self.overfitting or {}).get("rules"))
