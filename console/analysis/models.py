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


class RawTextPurge(models.Model):
    """One purge of a trace's raw text by the retention task or command (``analysis.retention``):
    which trace, by whom, after how many days, how many rows, when. Append-only: the model refuses
    changes and the database's triggers (migration 0007) refuse UPDATE, DELETE and TRUNCATE. The
    trace is named by id, name and content hash rather than a foreign key, so the record outlives
    the trace and no cascade ever has to touch it."""

    trace_ref = models.BigIntegerField(db_index=True, help_text="the purged trace's id")
    trace_name = models.CharField(max_length=200)
    trace_content_sha256 = models.CharField(max_length=64, blank=True)
    actor = models.CharField(
        max_length=200, help_text='"task workers.raw_text_purge" or "command purge_raw_text (user)"'
    )
    retention_days = models.PositiveIntegerField(help_text="days after import the text was kept")
    requests_purged = models.PositiveIntegerField(help_text="trace request rows blanked")
    results_purged = models.PositiveIntegerField(help_text="request result rows blanked")
    comparisons_purged = models.PositiveIntegerField(help_text="stored comparisons blanked")
    at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["at", "id"]

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise ValueError("raw text purge records are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("raw text purge records are append-only")

    def __str__(self) -> str:
        return f"trace {self.trace_ref} purged by {self.actor} at {self.at:%Y-%m-%d %H:%M:%S}"
