from __future__ import annotations

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError

from console.accounts import teams
from console.accounts.models import Team
from console.accounts.scopes import DEFAULT_SCOPES, READ, SIGN, WRITE
from console.accounts.services import api_token_scopes_clean
from console.accounts.throttle import (
    client_address,
    minutes_text,
    throttle_failure_record,
    throttle_locked_seconds,
    throttle_reset,
)

LOGIN_SCOPE = "login"


class ThrottledAuthenticationForm(AuthenticationForm):
    """Django's login form, refusing a username + address after too many failures in a window.

    Failures are counted on the username as Django authenticates it: the form's ``UsernameField``
    strips it and applies NFKC (so ``ｅng2``, with a full-width letter, is ``eng2``), and
    ``ModelBackend`` then matches it exactly, case included. Every spelling that can log in to
    one account shares that account's counter; nothing else does."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "throttled": "Too many failed login attempts: try again in %(wait)s.",
    }

    def _account_key(self) -> str:
        """The username the backend will look up: the field's own normalisation of what was typed."""
        raw = self.data.get(self.add_prefix("username"))
        return str(self.fields["username"].to_python(raw if isinstance(raw, str) else "") or "")

    def clean(self):
        parts = (self._account_key(), client_address(self.request))
        locked = throttle_locked_seconds(scope=LOGIN_SCOPE, parts=parts)
        if locked:
            raise forms.ValidationError(
                self.error_messages["throttled"], code="throttled", params={"wait": minutes_text(locked)}
            )
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            throttle_failure_record(scope=LOGIN_SCOPE, parts=parts)
            locked = throttle_locked_seconds(scope=LOGIN_SCOPE, parts=parts)
            if locked:
                raise forms.ValidationError(
                    self.error_messages["throttled"], code="throttled", params={"wait": minutes_text(locked)}
                ) from None
            raise
        if self.user_cache is not None:  # a password was checked and matched (not a form error)
            throttle_reset(scope=LOGIN_SCOPE, parts=parts)
        return cleaned


class ScopesField(forms.MultipleChoiceField):
    """Checkboxes for a token's scopes, checked by the one rule (``api_token_scopes_clean``)."""

    def clean(self, value):
        asked = self.to_python(value)
        try:
            return api_token_scopes_clean(asked)
        except ValidationError as exc:
            raise forms.ValidationError(exc.message_dict["scopes"]) from None


class ApiTokenCreateForm(forms.Form):
    name = forms.CharField(
        max_length=100, initial="default", help_text="what the token is for (a script, CI)"
    )
    scopes = ScopesField(
        choices=[
            (READ, "read: list and fetch (GET)"),
            (WRITE, "write: upload, run, cancel, adopt, edit drafts (POST, PATCH)"),
            (SIGN, "sign: sign off decisions (approvers)"),
        ],
        initial=list(DEFAULT_SCOPES),
        widget=forms.CheckboxSelectMultiple,
        help_text="what the token may do; your role still limits it",
    )
    team = forms.ModelChoiceField(
        queryset=Team.objects.none(),
        required=False,  # clean_team: the user's one team when they have one
        help_text="the one team the token acts in, with your role there",
    )

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        own = (
            Team.objects.filter(memberships__user=user).order_by("name")
            if user is not None
            else Team.objects.none()
        )
        self.fields["team"].queryset = own
        if len(own) == 1:
            self.fields["team"].initial = own[0]

    def clean_team(self) -> Team:
        return teams.team_or_only_one(
            self.cleaned_data.get("team"), self.fields["team"], what="the token acts in"
        )
