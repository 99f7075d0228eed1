"""Admin: drafts may be inspected and corrected; a signed decision and every archive row are
read-only here too (the model and the database refuse the write anyway)."""

from __future__ import annotations

from django.contrib import admin

from console.decisions.models import ArchiveRecord, AuditEvent, Decision, SignOff


@admin.register(Decision)
class DecisionAdmin(admin.ModelAdmin):
    list_display = ("id", "title", "status", "proposal", "experiment", "created_by", "created_at")
    list_filter = ("status", "proposal")
    readonly_fields = ("gate", "checklist", "comparison_key", "status", "created_by", "submitted_at")

    def has_change_permission(self, request, obj=None):
        if obj is not None and obj.is_signed:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        if obj is not None and obj.is_signed:
            return False
        return super().has_delete_permission(request, obj)

    def get_actions(self, request):
        # Bulk delete would bypass the per-object check above.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions


class _ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(SignOff)
class SignOffAdmin(_ReadOnlyAdmin):
    list_display = ("decision", "verdict", "signer", "signed_at")


@admin.register(ArchiveRecord)
class ArchiveRecordAdmin(_ReadOnlyAdmin):
    list_display = ("sequence", "decision", "bundle_sha256", "record_sha256", "archived_at")


@admin.register(AuditEvent)
class AuditEventAdmin(_ReadOnlyAdmin):
    list_display = ("decision", "action", "actor", "actor_role", "at")
