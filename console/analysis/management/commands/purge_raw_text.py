"""Purge the raw text of every trace past its retention period (``analysis.retention``), as the
daily ``workers.raw_text_purge`` task does; ``--dry-run`` prints what it would purge."""

from __future__ import annotations

import getpass

from django.conf import settings
from django.core.management.base import BaseCommand

from console.analysis.retention import raw_text_purge_due


class Command(BaseCommand):
    help = (
        "Purge prompts, messages, references and outputs of traces past SPECREVIEW_RAW_TEXT_RETENTION_DAYS."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--dry-run", action="store_true", help="print what would be purged; change nothing"
        )

    def handle(self, *args, dry_run=False, **options):
        if settings.SPECREVIEW_RAW_TEXT_RETENTION_DAYS is None:
            self.stdout.write("SPECREVIEW_RAW_TEXT_RETENTION_DAYS is not set: raw text is kept for ever")
        purged = raw_text_purge_due(actor=f"command purge_raw_text ({getpass.getuser()})", dry_run=dry_run)
        verb = "would purge" if dry_run else "purged"
        for p in purged:
            self.stdout.write(
                f"{verb} trace {p.trace_id} ({p.trace_name}), imported {p.imported_at:%Y-%m-%d}, "
                f"older than {p.retention_days} days: {p.requests} requests, {p.results} results, "
                f"{p.comparisons} comparisons"
            )
        self.stdout.write(f"{len(purged)} traces {verb}")
