"""Decisions: a proposal with its computed gate, checklist, rollback plan, sign-off and archive.

Invariant held here (not a workflow): once a decision is signed (approved, rejected or approved
with conditions) its row, its sign-offs and its archive record are never changed or deleted; a
sign-off is never changed or deleted from the moment it is written, signed decision or not.
The model refuses ``save()``/``delete()`` on a row that was loaded signed; on PostgreSQL a
trigger (migration 0002) also refuses UPDATE/DELETE at the database level, so a queryset
``update()`` or raw SQL cannot slip past either, and another (migration 0004) refuses TRUNCATE. Workflows (drafting, submitting, signing,
archiving) live in ``services.py`` and ``signing.py``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from console.experiments.models import Arm, Experiment


class FrozenDecisionError(Exception):
    """Raised on any attempt to change or delete a signed decision or its archive rows."""


class Decision(models.Model):
    class Proposal(models.TextChoices):
        ENABLE = "enable", "Enable everywhere with the candidate config"
        ENABLE_FOR_SLICE = "enable_for_slice", "Enable for a slice (policy)"
        KEEP_OFF = "keep_off", "Keep speculation off"

    class Status(models.TextChoices):
        DRAFT = "draft"
        SUBMITTED = "submitted"
        APPROVED = "approved"
        REJECTED = "rejected"
        APPROVED_WITH_CONDITIONS = "approved_with_conditions", "approved with conditions"

    SIGNED_STATUSES = (Status.APPROVED, Status.REJECTED, Status.APPROVED_WITH_CONDITIONS)

    title = models.CharField(max_length=200)
    experiment = models.ForeignKey(Experiment, on_delete=models.PROTECT, related_name="decisions")
    proposal = models.CharField(max_length=20, choices=Proposal.choices)
    candidate_arm = models.ForeignKey(
        Arm, null=True, blank=True, on_delete=models.PROTECT, related_name="decisions"
    )
    traffic_class = models.CharField(max_length=20, default="interactive", help_text="the promised class")
    rationale = models.TextField(blank=True)
    policy = models.JSONField(
        null=True, blank=True, help_text="the slice policy (enable_for_slice), as the policies page shows it"
    )
    policy_ref = models.CharField(max_length=500, blank=True, help_text="link to the policy page")
    gate_settings = models.JSONField(default=dict, blank=True)
    gate = models.JSONField(default=dict, blank=True, help_text="computed by decisions.gate, never typed in")
    comparison_key = models.CharField(max_length=64, blank=True)
    checklist_answers = models.JSONField(default=dict, blank=True, help_text="the engineer's answers")
    checklist = models.JSONField(
        default=list, blank=True, help_text="items as last computed (evidence + answers)"
    )
    rollback_triggers = models.JSONField(default=list, blank=True)
    rollback_revert_config = models.JSONField(default=dict, blank=True)
    rollback_steps = models.TextField(blank=True)
    rollback_owner = models.CharField(max_length=200, blank=True)
    rollback_verification = models.TextField(blank=True)
    supersedes = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="superseding"
    )
    status = models.CharField(max_length=30, choices=Status.choices, default=Status.DRAFT)
    approvals_required = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="distinct approvers it needs; empty: the deployment's SPECREVIEW_APPROVALS_REQUIRED "
        "(submission fixes the number)",
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    submitted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"#{self.pk} {self.title}"

    @classmethod
    def from_db(cls, db, field_names, values):
        instance = super().from_db(db, field_names, values)
        instance._loaded_status = getattr(instance, "status", None)
        return instance

    @property
    def is_signed(self) -> bool:
        return self.status in self.SIGNED_STATUSES

    @property
    def approvals_needed(self) -> int:
        """Distinct approvals that sign it: its own number, fixed at submission; a draft without one
        follows the deployment's setting; a decision submitted before approvals were counted needs one."""
        if self.approvals_required is not None:
            return self.approvals_required
        if self.status == self.Status.DRAFT:
            return settings.SPECREVIEW_APPROVALS_REQUIRED
        return 1

    @property
    def signoff(self) -> SignOff | None:
        """The signature that signed it (the last one: the approval that completed the count, or the
        rejection); None until it is signed. Reads ``signoffs`` (a prefetch when there is one)."""
        if self.pk is None or not self.is_signed:
            return None
        rows = self.signatures()
        return rows[-1] if rows else None

    def signatures(self) -> list[SignOff]:
        """Every signature, in the order they were made."""
        if self.pk is None:
            return []
        return sorted(self.signoffs.all(), key=lambda s: (s.signed_at, s.pk))

    @property
    def was_signed_when_loaded(self) -> bool:
        return getattr(self, "_loaded_status", None) in self.SIGNED_STATUSES

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and self.was_signed_when_loaded:
            raise FrozenDecisionError(f"decision #{self.pk} is signed and archived: it cannot be edited")
        super().save(*args, **kwargs)
        self._loaded_status = self.status

    def delete(self, *args: Any, **kwargs: Any):
        if self.was_signed_when_loaded or self.is_signed:
            raise FrozenDecisionError(f"decision #{self.pk} is signed and archived: it cannot be deleted")
        return super().delete(*args, **kwargs)


class AppendOnly(models.Model):
    """Rows written once and never changed (sign-offs, archive records, audit events; a rollout's
    looks and events): ``save()`` of a stored row and ``delete()`` raise ``FrozenDecisionError``."""

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise FrozenDecisionError(f"{type(self).__name__} rows are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any):
        raise FrozenDecisionError(f"{type(self).__name__} rows are append-only")


class SignOff(AppendOnly):
    """One approver's signature: a decision collects ``approvals_needed`` approvals from distinct
    approvers, or one rejection (signing is ``decisions.signing``)."""

    decision = models.ForeignKey(Decision, on_delete=models.PROTECT, related_name="signoffs")
    signer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    # A user may be renamed later; what pages and the API show is the name that signed.
    signer_username = models.CharField(
        max_length=150, blank=True, help_text="the signer's username at signing"
    )
    signer_role = models.CharField(max_length=20)
    verdict = models.CharField(max_length=30, choices=Decision.Status.choices)
    comment = models.TextField()
    conditions = models.TextField(blank=True)
    override_reason = models.TextField(blank=True, help_text="why it was approved with a failing gate")
    signed_at = models.DateTimeField()

    class Meta:
        ordering = ["signed_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["decision", "signer"], name="decisions_signoff_one_per_signer")
        ]


class ArchiveRecord(AppendOnly):
    """One signed decision, or one rollout's end state (``kind``), in the hash chain.

    ``bundle`` is the canonical JSON text exactly as hashed (a text column, not JSON, so the
    database cannot re-render it); ``bundle_sha256`` its sha256; ``previous_sha256`` the
    ``record_sha256`` of the record before (64 zeros for the first); ``record_sha256`` the sha256
    of the canonical header (sequence, decision, both hashes, time).
    """

    class Kind(models.TextChoices):
        DECISION = "decision", "signed decision"
        ROLLOUT = "rollout", "rollout's end"

    sequence = models.PositiveIntegerField(unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.DECISION)
    # A signed decision's record; empty on a rollout's, which names its decision below (a decision
    # has one record of its own and one per rollout that ended).
    decision = models.OneToOneField(Decision, null=True, on_delete=models.PROTECT, related_name="archive")
    rollout_decision = models.ForeignKey(
        Decision, null=True, blank=True, on_delete=models.PROTECT, related_name="rollout_records"
    )
    bundle = models.TextField()
    bundle_sha256 = models.CharField(max_length=64)
    previous_sha256 = models.CharField(max_length=64, unique=True)
    record_sha256 = models.CharField(max_length=64, unique=True)
    archived_at = models.DateTimeField()

    class Meta:
        ordering = ["sequence"]

    def __str__(self) -> str:
        return f"archive #{self.sequence} ({self.kind} of decision {self.decision_id or self.rollout_decision_id})"


class AuditEvent(AppendOnly):
    class Action(models.TextChoices):
        CREATED = "created"
        EDITED = "edited"
        SUBMITTED = "submitted"
        APPROVAL = "approval"  # a signature that leaves the decision waiting for more approvals
        SIGNED = "signed"
        SUPERSEDED = "superseded"
        EXPORTED = "exported"

    decision = models.ForeignKey(Decision, on_delete=models.PROTECT, related_name="events")
    action = models.CharField(max_length=20, choices=Action.choices)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    actor_role = models.CharField(max_length=20, blank=True)
    at = models.DateTimeField()
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_id} at {self.at:%Y-%m-%d %H:%M:%S}"
