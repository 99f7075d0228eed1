"""Content-Security-Policy on every response (Django 5.2 has none built in).

The policy lives in settings (``SPECREVIEW_CSP_POLICY``, on by ``SPECREVIEW_CSP``, the default in
production). Pages carry no inline scripts or event handlers: behaviour lives in
``static/js/console.js`` and figure data in ``<script type="application/json">`` blocks, which a
``script-src 'self'`` policy allows because they are data, not code.
"""

from __future__ import annotations

from django.conf import settings


class ContentSecurityPolicy:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if settings.SPECREVIEW_CSP and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = settings.SPECREVIEW_CSP_POLICY
        return response
