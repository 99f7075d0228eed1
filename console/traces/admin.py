"""Admin: teams and their memberships, for the installation's operators (staff). A team's redaction
patterns are the trace import's, so the form checks them with the import's own parser; being staff
grants no access to any team's traces, experiments or decisions (console/accounts/teams.py)."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from console.accounts.models import Membership, Team
from console.accounts.teams import memberships_forget
from console.traces.forms import redaction_patterns_checked


class TeamForm(forms.ModelForm):
    class Meta:
        model = Team
        fields = ("name", "redact_at_import", "redaction_patterns", "raw_text_retention_days")

    def clean_redaction_patterns(self) -> str:
        return redaction_patterns_checked(self.cleaned_data["redaction_patterns"])


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    fields = ("user", "role", "raw_text")
    autocomplete_fields = ("user",)


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    form = TeamForm
    inlines = [MembershipInline]
    list_display = ("name", "redact_at_import", "raw_text_retention_days", "created_at")
    search_fields = ("name",)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        memberships_forget(request.user)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "team", "role", "raw_text", "created_at")
    list_filter = ("team", "role")
    search_fields = ("user__username", "team__name")
    autocomplete_fields = ("user", "team")
