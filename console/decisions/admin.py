"""Admin: read-only. Decisions change only through the services (which audit every change);
a signed decision and its archive rows are refused by the model and the database as well."""

from __future__ import annotations

from django.contrib import admin

from console.decisions.models import ArchiveRecord, AuditEvent, Decision, SignOff


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


@admin.register(Decision)
class DecisionAdmin(_ReadOnlyAdmin):
    list_display = ("id", "title", "status", "proposal", "experiment", "created_by", "created_at")
    list_filter = ("status", "proposal")

    def get_actions(self, request):
        # Bulk delete would bypass the per-object permission check.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions
