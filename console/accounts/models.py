from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from console.accounts.roles import ROLES
from console.accounts.scopes import scopes_default

TEAM_NAME_RE = r"^[a-z0-9][a-z0-9_-]{0,63}$"


class Capability(models.Model):
    """Holds the permissions roles are made of; it has no table of its own."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("upload_trace", "Upload and delete traces"),
            ("run_experiment", "Define, run, retry and cancel experiments"),
            ("draft_decision", "Draft and edit decisions"),
            ("sign_decision", "Sign off decisions"),
            ("read_raw_text", "Read prompts, messages, tool outputs, references and model outputs"),
        ]


def api_token_expiry_default() -> datetime:
    """Now plus ``SPECREVIEW_API_TOKEN_DAYS`` (tokens that existed before expiry get it too)."""
    return timezone.now() + timedelta(days=settings.SPECREVIEW_API_TOKEN_DAYS)


class Team(models.Model):
    """Who owns traces and everything made from them (experiments, runs, comparisons, policies,
    decisions): a user sees a team's objects only as a member (``console.accounts.teams``), and
    acts on them with the role of that membership. Its settings: whether uploads redact by
    default, its own redaction patterns, and how long its raw text is kept."""

    name = models.CharField(
        max_length=64,
        unique=True,
        validators=[RegexValidator(TEAM_NAME_RE, "lower-case letters, digits, '-' and '_', at most 64")],
    )
    created_at = models.DateTimeField(auto_now_add=True)
    redact_at_import = models.BooleanField(
        default=False,
        help_text="every upload of the team redacts emails, keys, card numbers... before anything is stored",
    )
    redaction_patterns = models.TextField(
        blank=True, default="", help_text="the team's own patterns, one NAME=REGEX a line, added to every redacted upload"
    )
    raw_text_retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="days after import that raw text is kept; empty: the installation's "
        "SPECREVIEW_RAW_TEXT_RETENTION_DAYS (unset: for ever)",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user's role in one team (viewer, engineer or approver), and whether they read its raw text."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=[(r, r) for r in ROLES])
    raw_text = models.BooleanField(
        null=True,
        blank=True,
        help_text="read prompts and outputs: empty follows the role (engineers and approvers yes, viewers no)",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="membership_one_per_team")]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} in {self.team}"


class ApiToken(models.Model):
    """A bearer token for the JSON API. Only its sha256 is stored, plus its first characters
    (``prefix``) so that a user can tell their tokens apart and revoke one by name."""

    PREFIX_LENGTH = 8

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, default="default")
    key_sha256 = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=PREFIX_LENGTH, default="", blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(default=api_token_expiry_default)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # A list from console.accounts.scopes.SCOPES, in that order (services.api_token_scopes_clean).
    scopes = models.JSONField(default=scopes_default)
    # The one team the token acts in (its user's role there); null only for tokens made before teams,
    # which the migration gave their user's team (console.accounts.teams.token_team_ids).
    team = models.ForeignKey(Team, on_delete=models.CASCADE, null=True, blank=True, related_name="api_tokens")

    @property
    def status(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at <= timezone.now():
            return "expired"
        return "active"

    @staticmethod
    def digest(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    def __str__(self) -> str:
        return f"{self.user} / {self.name}"


class RawTextAccess(models.Model):
    """One display or export of raw text (prompts, messages, references, outputs) to a person: who,
    which object, through which page, export or API operation, when. Append-only: the model
    refuses changes and the database's triggers (migration 0005) refuse UPDATE, DELETE and
    TRUNCATE. One row per page view, export or API call, never per request row."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    username = models.CharField(max_length=150, help_text="the user's name at the time")
    view = models.CharField(max_length=100, help_text="the page, export or API operation")
    object_ref = models.CharField(max_length=200, help_text='the object shown, e.g. "run 12"')
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["at", "id"]

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise ValueError("raw text access events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("raw text access events are append-only")

    def __str__(self) -> str:
        return f"{self.username} read {self.object_ref} ({self.view}) at {self.at:%Y-%m-%d %H:%M:%S}"
