"""A trace is an immutable, hashed list of requests (see DESIGN.md, Vocabulary)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from console.accounts.teams import team_default

TRAFFIC_CLASSES = ("interactive", "batch")
SPLITS = ("train", "holdout")
# Trace.metadata key set when retention purged the trace's raw text (console/analysis/retention.py).
RAW_TEXT_PURGED_KEY = "raw_text_purged"


class Trace(models.Model):
    name = models.CharField(max_length=200)
    sha256 = models.CharField(max_length=64, db_index=True, help_text="sha256 of the uploaded file's bytes")
    content_sha256 = models.CharField(
        max_length=64, db_index=True, default="", help_text="sha256 of the canonical request list as stored"
    )
    source_filename = models.CharField(max_length=500, blank=True)
    source_format = models.CharField(max_length=40)
    size_bytes = models.BigIntegerField(default=0)
    request_count = models.PositiveIntegerField(default=0)
    holdout_fraction = models.FloatField(default=0.3)
    seed = models.BigIntegerField(default=0)
    arrival_spec = models.CharField(
        max_length=200,
        blank=True,
        help_text="where arrivals came from: 'trace', 'poisson:2.0', 'borrowed:...'",
    )
    paired_with = models.CharField(
        max_length=500,
        blank=True,
        help_text="prompt pool used to give a timing-only trace content; empty if real",
    )
    import_key = models.CharField(
        max_length=64,
        db_index=True,
        blank=True,
        default="",
        help_text="sha256 of the file's sha256 and the import options: the same upload twice is recognised",
    )
    warnings = models.JSONField(default=list, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    # The owner of the trace and of everything made from it (console/accounts/teams.py).
    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="traces")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.request_count} requests)"

    def save(self, *args, **kwargs) -> None:
        if self.team_id is None:  # made by a command or a script that named no team
            self.team = team_default()
        super().save(*args, **kwargs)

    @property
    def is_paired(self) -> bool:
        return bool(self.paired_with)


class TraceRequest(models.Model):
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="requests")
    position = models.PositiveIntegerField(help_text="index after sorting by arrival")
    request_id = models.CharField(max_length=200)
    arrival_s = models.FloatField(help_text="seconds from trace start")
    prompt = models.TextField(null=True, blank=True)
    messages = models.JSONField(null=True, blank=True)
    max_tokens = models.PositiveIntegerField()
    temperature = models.FloatField(null=True, blank=True)
    top_p = models.FloatField(null=True, blank=True)
    seed = models.BigIntegerField(null=True, blank=True)
    task = models.CharField(max_length=60, default="unknown")
    traffic_class = models.CharField(max_length=20, default="interactive")
    response_format = models.JSONField(null=True, blank=True)
    tools = models.JSONField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    prompt_tokens = models.PositiveIntegerField(
        null=True, blank=True, help_text="tokens (or documented estimate)"
    )
    split = models.CharField(max_length=10, choices=[(s, s) for s in SPLITS])
    source_index = models.PositiveIntegerField(default=0, help_text="0-based index in the source file")
    # Sessions (chat and agent traffic): turn k + 1 of a session is sent think_time_s after turn k's
    # answer finished, with that answer in its messages. A single request is a session of one turn.
    session_id = models.CharField(
        max_length=200, default="", blank=True, help_text="session (conversation) id; the request id if single-turn"
    )
    turn = models.PositiveIntegerField(default=0, help_text="0-based turn within the session")
    think_time_s = models.FloatField(
        default=0.0, help_text="seconds after the previous turn's answer finished (0 for turn 0)"
    )

    class Meta:
        ordering = ["trace", "position"]
        constraints = [
            models.UniqueConstraint(fields=["trace", "request_id"], name="trace_request_id_unique"),
            models.UniqueConstraint(fields=["trace", "position"], name="trace_position_unique"),
        ]
        indexes = [models.Index(fields=["trace", "split"])]

    def __str__(self) -> str:
        return f"{self.trace_id}:{self.request_id}"
