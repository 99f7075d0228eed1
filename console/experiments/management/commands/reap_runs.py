from django.core.management.base import BaseCommand

from console.experiments.services import runs_reap_stale


class Command(BaseCommand):
    help = "Fail runs left 'running' by a worker that died (no progress for --older-than seconds)."

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=float, default=600.0, help="seconds without progress")

    def handle(self, *args, older_than, **options):
        n = runs_reap_stale(older_than_s=older_than)
        self.stdout.write(f"{n} stale run(s) marked failed")
