"""The main job on the embedded default: demo user, (demo experiment), serve the console."""

from __future__ import annotations

import os

from django.core.management import call_command
from django.core.management.base import BaseCommand

from console.accounts.services import user_create

DEMO_USERS = (("demo", "approver"), ("demo-engineer", "engineer"), ("demo-viewer", "viewer"))
DEMO_PASSWORD = "specreview-demo"


class Command(BaseCommand):
    help = "Run the demo on the embedded default and serve the console."

    def add_arguments(self, parser):
        parser.add_argument("--no-serve", action="store_true", help="run the job, print the summary, exit")
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--quick", action="store_true", help="use the smallest model (under 3 minutes)")

    def handle(self, *args, no_serve, port, quick, **options):
        for username, role in DEMO_USERS:
            user_create(username=username, password=DEMO_PASSWORD, role=role)
        self.stdout.write(
            f"demo users: {', '.join(f'{u} ({r})' for u, r in DEMO_USERS)}; password {DEMO_PASSWORD!r}"
        )
        if no_serve:
            return
        self.stdout.write(f"serving the console at http://127.0.0.1:{port}/  (Ctrl-C to stop)")
        call_command("runserver", f"127.0.0.1:{port}", "--noreload")
