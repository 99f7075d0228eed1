"""What a run produces: one row per request, the run's telemetry, its results packed into one
value, and the summaries cached per run.

The tables keep the names they had when these models lived in the analysis app
(``analysis_*``): the move was a change of Django state only (``migrations/0001_initial.py``).
"""

from __future__ import annotations

from django.db import models

from console.experiments.models import Run
from console.results.arrays import PackedArrayField
from console.traces.models import TraceRequest


class RequestResult(models.Model):
    """One request in one run. Times are seconds from the run's replay start (perf_counter).

    The per-chunk and per-step arrays are packed bytes (``console.results.arrays``): a list on
    the model, one ``frombuffer`` per column when an experiment's results load in bulk."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="results")
    trace_request = models.ForeignKey(TraceRequest, on_delete=models.PROTECT, related_name="results")
    request_id = models.CharField(max_length=200)
    scheduled_s = models.FloatField()
    sent_s = models.FloatField(null=True)
    first_token_s = models.FloatField(null=True)
    finish_s = models.FloatField(null=True)
    queue_s = models.FloatField(default=0.0)
    chunk_times = PackedArrayField(kind="float", help_text="seconds from run start, one per visible chunk")
    chunk_tokens = PackedArrayField(kind="int", help_text="tokens per chunk")
    num_output_tokens = models.PositiveIntegerField(default=0)
    output_text = models.TextField(blank=True)
    output_token_ids = PackedArrayField(kind="int", help_text="the output's token ids")
    finish_reason = models.CharField(max_length=40, null=True, blank=True)
    drafted = PackedArrayField(kind="int", help_text="draft tokens proposed per verification step")
    accepted = PackedArrayField(kind="int", help_text="draft tokens accepted per verification step")
    spec_totals = models.JSONField(
        null=True,
        blank=True,
        default=None,
        help_text="a server's per-request spec-decode totals without its steps "
        '(vLLM summary level): {"drafts", "draft_tokens", "accepted"}',
    )
    error = models.TextField(blank=True)
    json_valid = models.BooleanField(null=True)
    schema_valid = models.BooleanField(null=True)
    tool_call_valid = models.BooleanField(null=True)

    class Meta:
        db_table = "analysis_requestresult"
        ordering = ["run", "scheduled_s"]
        constraints = [
            models.UniqueConstraint(fields=["run", "request_id"], name="result_run_request_unique")
        ]


class RunTelemetry(models.Model):
    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="telemetry")
    peak_memory_bytes = models.BigIntegerField(null=True)
    gpu_peak_memory_bytes = models.BigIntegerField(null=True)
    mean_util = models.FloatField(null=True)
    energy_j = models.FloatField(null=True)
    cpu_time_s = models.FloatField(null=True)
    counters = models.JSONField(default=dict, blank=True, help_text="engine counter deltas over the run")
    samples = models.JSONField(
        default=list, blank=True, help_text="downsampled [t, memory, util, power] series"
    )

    class Meta:
        db_table = "analysis_runtelemetry"


class RunSummary(models.Model):
    """Metrics computed once per finished run and cached."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="summary")
    version = models.PositiveIntegerField(default=1)
    data = models.JSONField(default=dict)
    computed_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "analysis_runsummary"


class RunResultsPack(models.Model):
    """A finished run's result rows packed into one value (``console.results.frame_pack``), so a
    comparison loads the run in one read. Derived data: the rows stay the source of truth, and
    a pack counts only while its run still holds ``n_rows`` rows whose highest id is
    ``max_result_id`` (``selectors._packed_frames``)."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="results_pack")
    version = models.PositiveIntegerField(help_text="selectors.RESULTS_PACK_VERSION it was packed with")
    n_rows = models.PositiveIntegerField()
    max_result_id = models.BigIntegerField(null=True)
    data = models.BinaryField()
    created_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "analysis_runresultspack"
