from __future__ import annotations

from django import forms
from django.contrib.auth.forms import AuthenticationForm

from console.accounts.throttle import (
    client_address,
    minutes_text,
    throttle_failure_record,
    throttle_locked_seconds,
    throttle_reset,
)

LOGIN_SCOPE = "login"


class ThrottledAuthenticationForm(AuthenticationForm):
    """Django's login form, refusing a username + address after too many failures in a window."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "throttled": "Too many failed login attempts: try again in %(wait)s.",
    }

    def clean(self):
        username = (self.data.get("username") or "").strip().lower()
        parts = (username, client_address(self.request))
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
        throttle_reset(scope=LOGIN_SCOPE, parts=parts)
        return cleaned


class ApiTokenCreateForm(forms.Form):
    name = forms.CharField(
        max_length=100, initial="default", help_text="what the token is for (a script, CI)"
    )
