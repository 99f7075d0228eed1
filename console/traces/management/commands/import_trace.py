"""python manage.py import_trace PATH [--name N] [--format F] [--arrival SPEC] [--pair-with SRC] [--holdout F] [--seed S]
[--turns first|all] [--think-time const:S|exp:MEAN|none]"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.accounts.models import Team
from console.accounts.teams import team_default
from console.traces.errors import TraceImportError
from console.traces.parsers import PARSERS
from console.traces.parsers.mapped import field_mapping_parse
from console.traces.selectors import trace_as_dict
from console.traces.services import trace_import_path


class Command(BaseCommand):
    help = "Import a trace file; prints the trace id and a summary, or the list of errors (exit code 2)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path")
        parser.add_argument("--name", default="")
        parser.add_argument("--format", dest="source_format", choices=sorted(PARSERS), default=None)
        parser.add_argument(
            "--arrival", default=None, help="constant:RATE, poisson:RATE, gamma:RATE:CV, borrow:SRC"
        )
        parser.add_argument(
            "--pair-with", dest="pair_with", default=None, help="prompt pool: trace id or file path"
        )
        parser.add_argument("--holdout", type=float, default=0.3, help="holdout fraction, 0..1 (default 0.3)")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--default-max-tokens", type=int, default=256)
        parser.add_argument(
            "--task", dest="default_task", default=None, help="task label where the file has none"
        )
        parser.add_argument(
            "--turns",
            choices=("first", "all"),
            default="first",
            help="multi-turn prompt sets: the first turn of each conversation (default), or all turns as sessions",
        )
        parser.add_argument(
            "--think-time",
            dest="think_time",
            default=None,
            help="think time before later turns: const:SECONDS, exp:MEAN_SECONDS or none (seeded by --seed)",
        )
        parser.add_argument(
            "--redact",
            action="store_true",
            help="replace e-mail addresses, phone and card numbers, keys and IP addresses by placeholders before storing",
        )
        parser.add_argument(
            "--redact-patterns",
            dest="redact_patterns_file",
            default=None,
            help="with --redact: a file of your own NAME=REGEX patterns, one a line",
        )
        parser.add_argument("--max-bytes", type=int, default=None, help="size limit (bytes)")
        parser.add_argument("--user", default=None, help="username recorded as the uploader")
        parser.add_argument(
            "--team", default=None, help="the owning team's name (default: the installation's default team)"
        )
        parser.add_argument("--json", action="store_true", help="print the result as JSON")
        self._add_mapping_arguments(parser)

    def _add_mapping_arguments(self, parser: CommandParser) -> None:
        """A prompt set in any layout (docs/trace-format.md, field-mapped prompt sets)."""
        mapping = parser.add_argument_group("field-mapped prompt sets (JSON, JSONL, CSV, Parquet)")
        mapping.add_argument(
            "--prompt-field",
            default=None,
            help="dotted path to the prompt text or chat messages; selects the format",
        )
        mapping.add_argument("--id-field", default=None, help="dotted path to the request id")
        mapping.add_argument("--task-field", default=None, help="dotted path to the task label (else --task)")
        mapping.add_argument("--system-prompt", default=None, help="system message put before each prompt")
        mapping.add_argument(
            "--keep-field",
            dest="keep_fields",
            action="append",
            default=[],
            help="dotted path kept in metadata (references for graders); repeatable",
        )

    def handle(self, *args, path, user, team, json: bool = False, **options):  # noqa: A002 - argparse dest
        owner = Team.objects.filter(name=team).first() if team else team_default()
        if owner is None:
            raise CommandError(f"--team: no team {team!r} (manage.py team create NAME makes one)")
        uploaded_by = None
        if user:
            from django.contrib.auth import get_user_model

            uploaded_by = get_user_model().objects.filter(username=user).first()
            if uploaded_by is None:
                raise CommandError(f"no user {user!r}")
        keys = ("name", "source_format", "arrival", "pair_with", "seed", "default_max_tokens", "default_task")
        keys_sessions = ("turns", "think_time")
        kwargs = {k: options[k] for k in keys + keys_sessions}
        kwargs["redact"] = options["redact"]
        if options["redact_patterns_file"]:
            try:
                kwargs["redact_patterns"] = Path(options["redact_patterns_file"]).read_text()
            except (OSError, UnicodeDecodeError) as exc:
                raise CommandError(
                    f"cannot read --redact-patterns {options['redact_patterns_file']}: {exc}"
                ) from None
        try:
            kwargs["mapping"] = _mapping(options)
            result = trace_import_path(
                path=path,
                uploaded_by=uploaded_by,
                holdout_fraction=options["holdout"],
                max_bytes=options["max_bytes"],
                team=owner,
                **kwargs,
            )
        except FileNotFoundError:
            raise CommandError(f"no such file: {path}") from None
        except TraceImportError as exc:
            for line in exc.lines():
                self.stderr.write(line)
            self.stderr.write(f"not imported: {exc.total} error(s); nothing was stored")
            raise SystemExit(2) from None
        trace = result.trace
        if json:
            self.stdout.write(_dumps({"created": result.created, "trace": trace_as_dict(trace, detail=True)}))
            return
        self.stdout.write(str(trace.pk))
        summary = trace.summary or {}
        self.stdout.write(result.message)
        self.stdout.write(
            f"trace {trace.pk} “{trace.name}”: {trace.request_count} requests, format {trace.source_format}, "
            f"arrivals {trace.arrival_spec or 'trace'}, duration {summary.get('duration_s', 0)} s"
        )
        self.stdout.write(f"  by task: {summary.get('by_task', {})}")
        self.stdout.write(f"  by class: {summary.get('by_class', {})}; split: {summary.get('by_split', {})}")
        if trace.paired_with:
            self.stdout.write(f"  PAIRED: prompts come from {trace.paired_with}, not from the trace")
        for warning in trace.warnings:
            self.stdout.write(f"  warning: {warning}")


def _mapping(options: dict):
    return field_mapping_parse(
        prompt_field=options.get("prompt_field"),
        id_field=options.get("id_field"),
        task_field=options.get("task_field"),
        system_prompt=options.get("system_prompt"),
        keep_fields=options.get("keep_fields"),
    )


def _dumps(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)
