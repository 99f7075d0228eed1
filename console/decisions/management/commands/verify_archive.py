"""Recompute the decision archive's hash chain; exit 1 naming the first record that breaks it."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from console.decisions.selectors import archive_verify


class Command(BaseCommand):
    help = "Verify the decision archive: bundle hashes, the chain, and each signed row against its bundle."

    def handle(self, *args, **options):
        result = archive_verify()
        if result["ok"]:
            self.stdout.write(
                self.style.SUCCESS(
                    f"archive verified: {result['checked']} records, chain intact; head {result['head_sha256']}"
                )
            )
            return
        br = result["break"]
        where = f"record #{br['sequence']} " if br["sequence"] is not None else ""
        message = (
            f"archive BROKEN at {where}(decision {br['decision_id']}): {br['reason']}; "
            f"{result['checked']} records before it verified"
        )
        raise CommandError(message, returncode=1)
