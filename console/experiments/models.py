"""Experiments: a baseline against candidates, expanded into a matrix of runs; and the heartbeat
rows that show a worker reached the database."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from console.traces.models import Trace


class ServingConfig(models.Model):
    """Engine kind, target model, engine args, speculative config (vLLM's keys) or None."""

    name = models.CharField(max_length=200)
    engine = models.CharField(max_length=20)
    target_model = models.CharField(max_length=500)
    engine_args = models.JSONField(default=dict, blank=True)
    speculative_config = models.JSONField(null=True, blank=True)
    content_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name

    @property
    def is_baseline(self) -> bool:
        return self.speculative_config is None


class Experiment(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        CANCELLED = "cancelled"

    name = models.CharField(max_length=200)
    trace = models.ForeignKey(Trace, on_delete=models.PROTECT, related_name="experiments")
    split = models.CharField(max_length=10, default="all")
    engine = models.CharField(max_length=20, default="hf")
    target_model = models.CharField(max_length=500)
    hardware_label = models.CharField(max_length=200, blank=True)
    load_levels = models.JSONField(
        default=list, help_text='[{"label": "1x", "rate_multiplier": 1.0, "concurrency": null}]'
    )
    output_limit = models.PositiveIntegerField(null=True, blank=True, help_text="cap on max_tokens")
    output_buckets = models.JSONField(
        default=list,
        blank=True,
        help_text='recorded-output-length buckets, a matrix axis: [{"label", "lo", "hi", "output_limit"}]; empty = none',
    )
    deadlines = models.JSONField(default=dict, blank=True)
    sampling = models.CharField(max_length=10, default="trace", help_text="'trace' or 'greedy'")
    endpoints = models.JSONField(
        default=dict,
        blank=True,
        help_text="declared before it runs: promised class, primary latency metric and stat, success metric",
    )
    repeats = models.PositiveIntegerField(default=3)
    warmup = models.PositiveIntegerField(default=1)
    scheduling = models.CharField(
        max_length=10,
        default="parallel",
        help_text="parallel: every run released at once; lockstep: one at a time, in matrix order (console/experiments/scheduling.py)",
    )
    cost_per_hour_usd = models.FloatField(default=0.0)
    power_price_usd_per_kwh = models.FloatField(null=True, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.DRAFT)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    notes = models.TextField(blank=True)
    capacity_search = models.JSONField(
        null=True,
        blank=True,
        help_text="capacity search per arm and repeat (console.experiments.capacity_search); null = off",
    )
    until_decided = models.JSONField(
        default=dict,
        blank=True,
        help_text="run until decided (console.experiments.until_decided): the plan declared before it runs, "
        "its looks and the stop; empty = off (``repeats`` is then the first batch, and grows)",
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name


class Arm(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="arms")
    config = models.ForeignKey(ServingConfig, on_delete=models.PROTECT, related_name="arms")
    label = models.CharField(max_length=200)
    position = models.PositiveIntegerField()
    is_baseline = models.BooleanField(default=False)

    class Meta:
        ordering = ["experiment", "position"]
        constraints = [models.UniqueConstraint(fields=["experiment", "label"], name="arm_label_unique")]

    def __str__(self) -> str:
        return self.label


class Run(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        CANCELLED = "cancelled"

    ERROR_MAX = 4000  # characters of a run's error kept

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="runs")
    arm = models.ForeignKey(Arm, on_delete=models.CASCADE, related_name="runs")
    load_label = models.CharField(max_length=40)
    rate_multiplier = models.FloatField(default=1.0)
    concurrency_cap = models.PositiveIntegerField(null=True, blank=True)
    output_bucket = models.CharField(
        max_length=40, blank=True, help_text="label of its output-length bucket; empty = every request"
    )
    repeat = models.PositiveIntegerField(default=0)
    order = models.PositiveIntegerField(help_text="position in the interleaved execution order")
    queue = models.CharField(max_length=10, default="cpu")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    attempt = models.PositiveIntegerField(default=0)
    attempt_token = models.CharField(
        max_length=32, blank=True, help_text="set at each claim; only its holder may write the run"
    )
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="last sign of life of the worker holding the claim"
    )
    enqueued_at = models.DateTimeField(null=True, blank=True, help_text="when its task was last sent")
    celery_task_id = models.CharField(max_length=100, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    progress_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    config_hash = models.CharField(max_length=64, blank=True)
    versions = models.JSONField(default=dict, blank=True)
    hardware = models.JSONField(default=dict, blank=True)
    prompt_tokens = models.JSONField(
        default=dict,
        blank=True,
        help_text='per request id: {"n": tokens of the prompt the model was given (after the chat '
        'template, with tools and system prompt), "source": "engine" (the engine counted them) or '
        "\"trace\" (the trace's import-time count: a tokenizer's or an estimate)}",
    )
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    wall_s = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True)
    capacity_step = models.PositiveIntegerField(
        null=True, blank=True, help_text="1-based step of its arm and repeat's capacity search; null = a matrix run"
    )
    capacity_outcome = models.JSONField(
        null=True, blank=True, help_text="the step's SLO evaluation, stored once it finished (attempt-keyed)"
    )

    class Meta:
        ordering = ["experiment", "order"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "order"], name="run_order_unique"),
            # One run per step of a search: a retried or concurrent advance cannot add a second.
            models.UniqueConstraint(
                fields=["experiment", "arm", "repeat", "capacity_step"],
                condition=models.Q(capacity_step__isnull=False),
                name="run_capacity_step_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.arm.label} @ {self.load_label} #{self.repeat})"


class WorkerHeartbeat(models.Model):
    """Written by the ``workers.ping`` task: proof that a real worker reached the database. Its
    table keeps the name it had in ``console.accounts`` (the move was a change of Django state
    only: ``migrations/0008_worker_heartbeat.py``)."""

    note = models.CharField(max_length=200)
    hostname = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "accounts_workerheartbeat"
