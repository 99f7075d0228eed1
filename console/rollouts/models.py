"""A guarded rollout of a signed decision, and every look it took.

Invariant held here: a look (``Look``) and a rollout event (``RolloutEvent``) are written once and
never changed; the rollout's own row moves through its states (``Rollout.State``) by the services
in ``rollouts.services`` only. The triggers are copied from the decision at start (a signed
decision never changes, but the copy says what this rollout evaluated, whatever comes later).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from console.decisions.models import AppendOnly, Decision


class Rollout(models.Model):
    class State(models.TextChoices):
        RUNNING = "running"
        PAUSED = "paused"
        BREACHED = "breached", "paused: rollback recommended"
        ROLLED_BACK = "rolled_back", "rolled back"
        STOPPED = "stopped"
        COMPLETED = "completed"

    ACTIVE = (State.RUNNING, State.PAUSED, State.BREACHED)
    ENDED = (State.ROLLED_BACK, State.STOPPED, State.COMPLETED)

    decision = models.ForeignKey(Decision, on_delete=models.PROTECT, related_name="rollouts")
    prometheus = models.CharField(max_length=64, help_text="a registered Prometheus (SPECREVIEW_PROMETHEUS)")
    candidate_pool = models.CharField(max_length=500, help_text="label matchers of the candidate's pods")
    control_pool = models.CharField(max_length=500, help_text="label matchers of the control's pods")
    stages = models.JSONField(help_text='[{"share": percent of traffic, "minutes": duration}, ...]')
    alpha = models.FloatField(default=0.05, help_text="false-alarm rate of each trigger over the rollout")
    triggers = models.JSONField(help_text="the decision's triggers at start, in full")
    state = models.CharField(max_length=20, choices=State.choices, default=State.RUNNING)
    stage = models.PositiveIntegerField(default=0, help_text="index into stages")
    reason = models.TextField(blank=True, help_text="why it paused, stopped or was rolled back")
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    started_at = models.DateTimeField()
    stage_started_at = models.DateTimeField()
    evaluated_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    archive_sha256 = models.CharField(max_length=64, blank=True, help_text="record_sha256 of its end state")

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            # One active rollout per decision at a time.
            models.UniqueConstraint(
                fields=["decision"],
                condition=models.Q(state__in=["running", "paused", "breached"]),
                name="rollouts_one_active_per_decision",
            )
        ]

    def __str__(self) -> str:
        return f"rollout #{self.pk} of decision {self.decision_id} ({self.state})"

    @property
    def is_active(self) -> bool:
        return self.state in self.ACTIVE


class Look(AppendOnly):
    """One trigger looked at once: both pools' values over its window, the observation the
    sequential test adds (candidate minus control, or the candidate's value), and the test's
    state after it. ``state`` ``no_data`` or ``error`` adds no observation."""

    class State(models.TextChoices):
        NOT_ENOUGH = "not_enough", "not enough looks yet"
        OK = "ok"
        BREACH = "breach"
        NO_DATA = "no_data", "no data"
        ERROR = "error"

    rollout = models.ForeignKey(Rollout, on_delete=models.PROTECT, related_name="looks")
    trigger = models.PositiveIntegerField(help_text="index into the rollout's triggers")
    at = models.DateTimeField(help_text="the end of the window looked at")
    stage = models.PositiveIntegerField()
    candidate = models.FloatField(null=True)
    control = models.FloatField(null=True)
    observation = models.FloatField(null=True)
    n = models.PositiveIntegerField(default=0, help_text="observations so far")
    mean = models.FloatField(null=True)
    p_value = models.FloatField(null=True, help_text="always-valid p-value")
    state = models.CharField(max_length=20, choices=State.choices)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["rollout", "trigger", "at"])]


class RolloutEvent(AppendOnly):
    """The rollout's audit trail: started, each look, paused, resumed, breach, rolled back,
    stopped, completed. ``actor`` is empty for the periodic evaluation."""

    rollout = models.ForeignKey(Rollout, on_delete=models.PROTECT, related_name="events")
    action = models.CharField(max_length=30)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    at = models.DateTimeField()
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]
