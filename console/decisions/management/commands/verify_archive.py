"""Recompute the decision archive's hash chain; exit 1 naming the first record that breaks it.

Whoever can write the database could rebuild the whole chain with fresh hashes; the head hash,
recorded somewhere else after each sign-off (a ticket, a git repository), is what catches that:
``--expect-head HASH`` exits 1 when the chain no longer ends there.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from console.decisions.models import ArchiveRecord
from console.decisions.selectors import archive_verify


class Command(BaseCommand):
    help = "Verify the decision archive: bundle hashes, the chain, and each signed row against its bundle."

    def add_arguments(self, parser):
        parser.add_argument(
            "--print-head", action="store_true", help="print only the head hash (after verifying the chain)"
        )
        parser.add_argument(
            "--expect-head",
            metavar="SHA256",
            help="the head hash recorded elsewhere: exit 1 unless the verified chain still ends with it",
        )

    def handle(self, *args, print_head=False, expect_head=None, **options):
        result = archive_verify()
        if result["ok"] and expect_head is not None:
            expected = expect_head.strip().lower()
            if expected != result["head_sha256"]:
                recorded = (
                    ArchiveRecord.objects.filter(record_sha256=expected)
                    .values_list("sequence", flat=True)
                    .first()
                )
                where = (
                    f"it is record #{recorded}'s hash: records after it were added since"
                    if recorded is not None
                    else "no record has that hash: the chain was rewritten or records were removed"
                )
                raise CommandError(
                    f"archive head MISMATCH: expected {expected}, the archive ends with {result['head_sha256']} "
                    f"({result['checked']} records); {where}",
                    returncode=1,
                )
        if result["ok"] and print_head:
            self.stdout.write(result["head_sha256"])
            return
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
