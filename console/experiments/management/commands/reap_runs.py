from django.conf import settings
from django.core.management.base import BaseCommand

from console.experiments.runs import runs_reap


class Command(BaseCommand):
    help = (
        "Once, what the periodic reaper does: re-queue or fail runs whose worker stopped beating, "
        "and re-send queued runs whose message the broker lost."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than",
            type=float,
            default=float(settings.SPECREVIEW_RUN_STALE_AFTER_S),
            help="seconds without a heartbeat after which a running run counts as lost",
        )
        parser.add_argument(
            "--resend-after",
            type=float,
            default=None,
            help="seconds after sending before a queued run missing from the broker is sent again "
            "(default: --older-than)",
        )

    def handle(self, *args, older_than, resend_after, **options):
        report = runs_reap(stale_after_s=older_than, resend_after_s=resend_after)
        self.stdout.write(str(report))
