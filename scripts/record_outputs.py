"""Record what the console makes of two synthetic experiments, and compare two recordings.

Issue 20 restructures the code without changing what it does; this is the check. A recording
builds the bench's experiment (bench/analysis.py: baseline + n-gram k=2, k=4 at 1x, 2x, 4x, one
repeat, ``--requests`` per run) and the browser tests' one (tests/browser/test_console_browser.py:
60 requests, two repeats), each in a Postgres database of its own that it creates and drops
(DATABASE_URL's server, database ``<name>_golden``). For each it stores the comparison as the
worker does (results packs, then ``comparison_refresh``), fits a slice policy (as ``manage.py demo``
does), drafts a decision per candidate arm and one from the policy (as tests/decisions do), takes
that one through submit and sign-off, and fetches every export through the views a user would
call: comparison JSON (page and API), results CSV, experiment API, the policy's rules, vllm serve
lines and LiteLLM config (and API), each decision's Markdown, PDF (its text) and evidence bundle
(and API). One JSON file per experiment (DIR/bench.json, DIR/browser.json), one key per artefact.

    .venv/bin/python scripts/record_outputs.py record --out DIR [--requests 10000] [--only bench|browser]
    .venv/bin/python scripts/record_outputs.py --compare DIR_A DIR_B   (or two JSON files)

``--compare`` walks both trees: numbers within 1e-9 (relative or absolute), everything else
exact; it prints the first 50 differences with their JSON paths and exits 1 on any.

Normalised (the same code recorded twice must give the same bytes):
- ISO-8601 timestamps anywhere in a string (the API's and the bundle's ``*_at`` fields, the
  Markdown's and PDF's "at" lines and audit trail): "<time>" (they come from the clock).
- The comparison cache key and a decision's ``comparison_key`` (hashes of the runs' finish
  times), an archive record's ``bundle_sha256``/``record_sha256``/``previous_sha256`` (hashes of
  text holding timestamps): "<sha256:timed>", wherever the same value appears, text included.
- The PDF: its text per page, never its bytes (reportlab stamps a creation time and a random id).
Kept as they are: database ids. Each experiment gets a fresh database, so ids follow the order
rows are created in; the same writes give the same ids, and a changed id is a changed write order.
Seeds are fixed (the synthetic experiment's, the bootstrap's), so nothing else varies.
Reduced, not normalised: a results CSV over 2,000 rows (the bench's 90,000) is kept as its header,
first 20 rows and per-column count, sum, min and max of the numbers and the distinct texts.

Run it from the root of the checkout to record (the working directory): that code is imported,
whichever checkout the script file sits in. A full recording took 4.8-6.8 min on the shared
2-core machine under a load average of 5-9 (the bench 270-370 s, building its 90,000 rows half of
it; this process's CPU about 95 s in all, Postgres's on top); the browser one 9-27 s.

Long because: one file, so that a copy runs in an older checkout (the pristine worktree of the
"before" recording) with nothing else to bring along.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import io
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path.cwd()  # the checkout whose code is recorded (a pristine worktree runs a copy of this)
TOLERANCE = 1e-9
MAX_SHOWN = 50
FULL_CSV_ROWS = 2000  # above this, the results CSV is kept as per-column fingerprints
TIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2}|\s?UTC)?")
TIMED_HASH_KEYS = ("key", "comparison_key", "bundle_sha256", "record_sha256", "previous_sha256")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
GENESIS = "0" * 64  # the first archive record's previous_sha256: a constant, kept
EXPERIMENTS = {
    # name: (experiment_synthesize kwargs, n_boot: None = the worker's default)
    "bench": ({"ks": (2, 4), "loads": "1x,2x,4x", "repeats": 1}, 1000),
    "browser": ({"n_requests": 60, "repeats": 2}, None),
}


# --- comparing two recordings (plain JSON, no Django) -----------------------------------------


def _numbers_equal(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return a == b or abs(a - b) <= TOLERANCE or abs(a - b) <= TOLERANCE * max(abs(a), abs(b))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def tree_diff(a: Any, b: Any, path: str = "$") -> Iterator[str]:
    """Each difference between two JSON values, as ``path: what``. Numbers where either is a
    float compare within ``TOLERANCE`` (relative or absolute); everything else exactly."""
    if _is_number(a) and _is_number(b) and (isinstance(a, float) or isinstance(b, float)):
        if not _numbers_equal(float(a), float(b)):
            yield f"{path}: {a!r} != {b!r}"
    elif isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in b:
                yield f"{path}.{key}: only in A"
            elif key not in a:
                yield f"{path}.{key}: only in B"
            else:
                yield from tree_diff(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{path}: {len(a)} items != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            yield from tree_diff(x, y, f"{path}[{i}]")
    elif type(a) is not type(b) or a != b:
        yield f"{path}: {_short(a)} != {_short(b)}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def compare(a: Path, b: Path) -> list[str]:
    """Differences between two recordings: two directories of <experiment>.json, or two files."""
    if a.is_file() and b.is_file():
        return list(tree_diff(_load(a), _load(b)))
    left, right = ({p.stem: p for p in sorted(d.glob("*.json"))} for d in (a, b))
    out = [f"{name}.json: only in {'A' if name in left else 'B'}" for name in sorted(set(left) ^ set(right))]
    if not left and not right:
        out.append(f"no recordings in {a} or {b}")
    for name in sorted(set(left) & set(right)):
        out += tree_diff(_load(left[name]), _load(right[name]), f"{name}:$")
    return out


# --- normalising what is inherently unstable ---------------------------------------------------


def _timed_hashes(value: Any, found: set[str]) -> set[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in TIMED_HASH_KEYS and isinstance(item, str) and HEX64.match(item) and item != GENESIS:
                found.add(item)
            _timed_hashes(item, found)
    elif isinstance(value, list):
        for item in value:
            _timed_hashes(item, found)
    return found


def normalise(value: Any, hashes: set[str] | None = None) -> Any:
    """``value`` with timestamps and the hashes of timed content replaced (module docstring)."""
    hashes = _timed_hashes(value, set()) if hashes is None else hashes
    if isinstance(value, dict):
        return {key: normalise(item, hashes) for key, item in value.items()}
    if isinstance(value, list):
        return [normalise(item, hashes) for item in value]
    if isinstance(value, str):
        for digest in hashes:
            value = value.replace(digest, "<sha256:timed>")
        return TIME_RE.sub("<time>", value)
    return value


# --- turning responses into JSON ---------------------------------------------------------------


def _cell(text: str) -> Any:
    """A CSV cell as the number or JSON list it holds, so numbers compare within the tolerance.
    The shortcuts give what ``int()`` then ``float()`` would, without raising on every cell."""
    head = text[:1]
    if not text or (head.isalpha() and head not in "iInN"):
        return text  # float() reads no word but inf and nan
    if head in ("[", "{"):
        try:
            return json.loads(text)
        except ValueError:
            return text
    if not any(c in text for c in ".eE"):  # int() never reads these
        try:
            return int(text)
        except ValueError:
            pass
    try:
        return float(text)
    except ValueError:
        return text


def _flat_numbers(value: Any) -> Iterator[float]:
    if _is_number(value):
        yield float(value)
    elif isinstance(value, list):
        for item in value:
            yield from _flat_numbers(item)


def _column_values(cells: tuple[str, ...]) -> tuple[list[float], list[str]]:
    """A column's numbers (lists flattened, NaN left out) and its distinct texts, the cells read
    as :func:`_cell` reads them. A column of plain numbers, or of flat JSON lists of numbers, is
    read in one pass (the bench's 90,000 rows: seconds, not tens of seconds)."""
    try:
        if all(c[:1] == "[" and c[-1:] == "]" for c in cells):
            flat = json.loads("[" + ",".join(c[1:-1] for c in cells if len(c) > 2) + "]")
            if set(map(type, flat)) <= {int, float}:
                return [x for x in map(float, flat) if x == x], []  # x != x: NaN
        else:
            return [x for x in map(float, cells) if x == x], []
    except ValueError:
        pass
    values = [_cell(c) for c in cells]
    numbers = [x for v in values for x in _flat_numbers(v) if not math.isnan(x)]
    return numbers, sorted({v for v in values if isinstance(v, str)})


def _column_fingerprint(cells: tuple[str, ...]) -> dict[str, Any]:
    """Count, sum, min and max of a column's numbers, and its distinct texts (the first 50)."""
    numbers, texts = _column_values(cells)
    return {
        "numbers": len(numbers),
        "sum": math.fsum(numbers),
        "min": min(numbers, default=None),
        "max": max(numbers, default=None),
        "texts": texts[:50],
        "n_texts": len(texts),
    }


def csv_record(text: str) -> dict[str, Any]:
    """The results CSV: every row when it is small, else the header, the first 20 rows and per
    column the count, sum, min and max of its numbers (lists flattened) or its distinct texts."""
    raw = list(csv.reader(io.StringIO(text)))
    header, body = ([_cell(c) for c in raw[0]], raw[1:]) if raw else ([], [])
    if len(body) <= FULL_CSV_ROWS:
        return {"header": header, "n_rows": len(body), "rows": [[_cell(c) for c in row] for row in body]}
    columns = {
        str(name): _column_fingerprint(cells)
        for name, cells in zip(header, zip(*body, strict=True), strict=False)
    }
    first = [[_cell(c) for c in row] for row in body[:20]]
    return {"header": header, "n_rows": len(body), "first_rows": first, "columns": columns}


def pdf_text(content: bytes) -> list[list[str]]:
    """The PDF's text, per page, per line (pypdfium2, as tests/decisions/test_export.py reads it)."""
    # seam: an optional dependency of the dev extra, loaded only when a PDF is recorded
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(content)
    return [
        document[i].get_textpage().get_text_range().replace("\r", "").split("\n")
        for i in range(len(document))
    ]


def response_record(response: Any) -> dict[str, Any]:
    """Status, the headers that say what the download is, and the body as JSON where it is JSON."""
    body = b"".join(response.streaming_content) if response.streaming else response.content
    kind = response.get("Content-Type", "")
    out: dict[str, Any] = {"status": response.status_code, "content_type": kind}
    for header in ("Content-Disposition", "X-Content-SHA256", "X-Rules-SHA256"):
        if response.has_header(header):
            out[header] = response[header]
    if "json" in kind:
        out["body"] = json.loads(body)
    elif "pdf" in kind:
        out["pages"] = pdf_text(body)
    elif "csv" in kind:
        out["body"] = csv_record(body.decode())
    else:
        out["lines"] = body.decode().split("\n")
    return out


# --- the product (only after django.setup()) ---------------------------------------------------


def _first(name: str, *modules: str) -> Any:
    """``name`` from the first of ``modules`` that has it: the new layout first, then the old."""
    for module in modules:
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError:
            continue
        if hasattr(found, name):
            return getattr(found, name)
    raise ImportError(f"{name} in none of {', '.join(modules)}")


def _product() -> SimpleNamespace:
    """The few public names a recording calls. This script sits on the top edge (it drives every
    layer), and must run against the code before and after issue 20's moves: hence the lookups by
    name with fallbacks, and nothing of the product imported at module level."""
    return SimpleNamespace(
        user_create=_first("user_create", "console.accounts.services"),
        experiment_synthesize=_first("experiment_synthesize", "tests.support.synthetic"),
        results_packs_store=_first(
            "results_packs_store", "console.results.services", "console.analysis.services"
        ),
        comparison_refresh=_first("comparison_refresh", "console.analysis.services"),
        policy_fit=_first("policy_fit", "console.policies.services"),
        policy_export=_first("policy_export", "console.policies.selectors"),
        PolicyInputError=_first("PolicyInputError", "console.policies.errors", "console.policies.selectors"),
        decision_comparison=_first("decision_comparison", "console.decisions.selectors"),
        **{
            name: _first(name, "console.decisions.services")
            for name in ("decision_create", "decision_update", "decision_submit", "decision_sign")
        },
    )


def _django_setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/specreview")
    sys.path.insert(0, str(ROOT))
    # seam: Django is set up from the environment before anything of it is imported
    import django

    django.setup()
    from django.conf import settings

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    # The named users are created per database; full-strength PBKDF2 costs seconds each here.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = (
        settings.DATABASES["default"]["NAME"] + "_golden"
    )


class _Recorder:
    """One experiment's recording: builds it, then fills ``out`` one artefact at a time."""

    def __init__(self, product: SimpleNamespace, *, name: str, requests: int) -> None:
        self.p, self.name, self.requests = product, name, requests
        self.out: dict[str, Any] = {}
        self.timings: list[tuple[str, float]] = []
        self.users: dict[str, Any] = {}
        self.clients: dict[str, Any] = {}

    def _timed(self, label: str, started: float) -> None:
        self.timings.append((label, time.perf_counter() - started))

    def get(self, url: str, role: str = "viewer") -> dict[str, Any]:
        t = time.perf_counter()
        recorded = response_record(self.clients[role].get(url))
        if time.perf_counter() - t > 5:  # the slow ones are said apart (the bench's results CSV)
            self._timed(f"GET {url}", t)
        return recorded

    def run(self) -> dict[str, Any]:
        from django.test import Client  # after django.setup()

        for role in ("engineer", "approver", "viewer"):
            self.users[role] = self.p.user_create(
                username=f"golden-{role}", password="golden-password", role=role
            )
            self.clients[role] = Client()
            self.clients[role].force_login(self.users[role])
        kwargs, n_boot = EXPERIMENTS[self.name]
        if self.name == "bench":
            kwargs = {**kwargs, "n_requests": self.requests}
        synthesize = {k: list(v) if isinstance(v, tuple) else v for k, v in kwargs.items()}
        self.out["meta"] = {"experiment": self.name, "synthesize": synthesize, "n_boot": n_boot}
        t = time.perf_counter()
        experiment = self.p.experiment_synthesize(**kwargs)
        self._timed("build", t)
        self._comparison(experiment, n_boot)
        policy = self._policy(experiment)
        self._decisions(experiment, policy)
        return normalise(self.out)

    def _comparison(self, experiment: Any, n_boot: int | None) -> None:
        t = time.perf_counter()
        # What the worker does as each run ends, then when the last one has.
        self.p.results_packs_store(experiment=experiment)
        extra = {} if n_boot is None else {"n_boot": n_boot}
        self.p.comparison_refresh(experiment_id=experiment.pk, **extra)
        self._timed("comparison", t)
        t = time.perf_counter()
        pk = experiment.pk
        self.out["comparison"] = self.get(f"/analysis/experiments/{pk}/comparison.json")
        self.out["comparison_api"] = self.get(f"/api/experiments/{pk}/comparison")
        self.out["experiment_api"] = self.get(f"/api/experiments/{pk}")
        self.out["results_csv"] = self.get(f"/analysis/experiments/{pk}/results.csv")
        self._timed("comparison exports", t)

    def _policy(self, experiment: Any) -> Any:
        t = time.perf_counter()
        try:
            # As `manage.py demo` fits one (its POLICY_MIN_SUPPORT: 4 requests per slice).
            policy = self.p.policy_fit(
                experiment=experiment, created_by=self.users["engineer"], min_support=4
            )
        except self.p.PolicyInputError as exc:
            self.out["policy"] = {"refused": str(exc)}
            return None
        self.out["policy"] = self.p.policy_export(policy=policy)
        self.out["policy_exports"] = {
            suffix: self.get(f"/policies/{policy.pk}/{suffix}")
            for suffix in ("rules.json", "vllm-serve.sh", "litellm.yaml")
        }
        self.out["policy_api"] = {
            "policy": self.get(f"/api/policies/{policy.pk}"),
            "deployment": self.get(f"/api/policies/{policy.pk}/deployment"),
        }
        self._timed("policy", t)
        return policy

    def _draft(self, experiment: Any, **kwargs: Any) -> Any:
        return self.p.decision_create(
            experiment=experiment,
            author=self.users["engineer"],
            comparison=self.p.decision_comparison(experiment=experiment),
            **kwargs,
        )

    def _decisions(self, experiment: Any, policy: Any) -> None:
        """A draft per candidate arm (enable, interactive), the last arm for batch too, and the
        policy's decision as the demo drafts it, completed, submitted and signed."""
        t = time.perf_counter()
        arms = list(experiment.arms.filter(is_baseline=False).order_by("position"))
        drafts = {
            f"enable {arm.label} interactive": self._draft(
                experiment, title="", proposal="enable", candidate_arm=arm, traffic_class="interactive"
            )
            for arm in arms
        }
        drafts[f"enable {arms[-1].label} batch"] = self._draft(
            experiment, title="", proposal="enable", candidate_arm=arms[-1], traffic_class="batch"
        )
        on = [r for r in ((policy.rules.get("rules") or []) if policy else []) if r.get("speculative_config")]
        arm = next((a for a in arms if on and a.label == on[0].get("arm")), None)
        drafts["policy signed"] = self._signed(
            self._draft(
                experiment,
                title=f"Speculative decoding for {experiment.name}",
                proposal="enable_for_slice" if arm is not None else "keep_off",
                candidate_arm=arm,
                traffic_class="interactive",
                rationale="Recorded by scripts/record_outputs.py from a synthetic experiment.",
                policy=self.p.policy_export(policy=policy) if arm is not None else None,
                policy_ref=f"/policies/{policy.pk}/" if arm is not None else "",
            )
        )
        self._timed("decisions", t)
        t = time.perf_counter()
        for key in (
            "gate",
            "checklist",
            "rollback",
            "decision_api",
            "decision_markdown",
            "decision_pdf",
            "decision_bundle",
        ):
            self.out[key] = {}
        for label, decision in drafts.items():
            decision.refresh_from_db()
            self.out["gate"][label] = decision.gate
            self.out["checklist"][label] = decision.checklist
            self.out["rollback"][label] = {
                "triggers": decision.rollback_triggers,
                "revert_config": decision.rollback_revert_config,
                "steps": decision.rollback_steps,
            }
            pk = decision.pk
            self.out["decision_api"][label] = self.get(f"/api/decisions/{pk}")
            self.out["decision_markdown"][label] = self.get(f"/decisions/{pk}/export.md")
            self.out["decision_pdf"][label] = self.get(f"/decisions/{pk}/export.pdf")
            self.out["decision_bundle"][label] = self.get(f"/decisions/{pk}/bundle.json")
        self._timed("decision exports", t)

    def _signed(self, decision: Any) -> Any:
        """Complete the draft as tests/decisions/conftest.py does, submit it, sign it (approved,
        with an override reason the service keeps only where the gate does not pass)."""
        engineer = self.users["engineer"]
        answers = {
            item["key"]: {"answer": "yes", "note": "golden recording"}
            for item in decision.checklist or []
            if not item.get("answer")
        }
        decision = self.p.decision_update(
            decision=decision,
            actor=engineer,
            changes={
                "checklist_answers": answers,
                "rollback_owner": "serving on-call",
                "rollback_verification": "p95 TPOT back to the baseline's within 15 min",
            },
        )
        decision = self.p.decision_submit(decision=decision, actor=engineer)
        return self.p.decision_sign(
            decision=decision,
            signer=self.users["approver"],
            verdict="approved",
            comment="golden recording",
            override_reason="synthetic data: recorded, not released",
        )


def record(out: Path, *, requests: int, only: str | None) -> None:
    """Record each experiment (or ``only`` one) into ``out``/<name>.json, each in its own database."""
    _django_setup()
    from django.test.utils import setup_databases, teardown_databases

    product = _product()
    code = Path(sys.modules["console"].__file__ or "").resolve().parent.parent
    print(f"recording the code in {code}")
    if code != ROOT.resolve():
        raise SystemExit(
            f"the product was imported from {code}, not from {ROOT}: run from the checkout's root"
        )
    out.mkdir(parents=True, exist_ok=True)
    for name in [only] if only else list(EXPERIMENTS):
        started, cpu = time.perf_counter(), time.process_time()
        old = setup_databases(verbosity=0, interactive=False)
        try:
            recorder = _Recorder(product, name=name, requests=requests)
            data = recorder.run()
        finally:
            teardown_databases(old, verbosity=0)
        path = out / f"{name}.json"
        path.write_text(json.dumps(data, indent=1, sort_keys=True, allow_nan=True) + "\n")
        steps = ", ".join(f"{label} {s:.1f} s" for label, s in recorder.timings)
        print(
            f"{name}: {time.perf_counter() - started:.1f} s, CPU {time.process_time() - cpu:.1f} s ({steps}) -> {path}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=["record"])
    parser.add_argument("--out", type=Path, help="directory for <experiment>.json")
    parser.add_argument(
        "--requests", type=int, default=10_000, help="requests per run of the bench experiment"
    )
    parser.add_argument("--only", choices=list(EXPERIMENTS))
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    args = parser.parse_args(argv)
    if args.compare:
        differences = compare(*args.compare)
        for line in differences[:MAX_SHOWN]:
            print(line)
        if len(differences) > MAX_SHOWN:
            print(f"... and {len(differences) - MAX_SHOWN} more")
        print(f"{len(differences)} difference(s)" if differences else "identical")
        return 1 if differences else 0
    if args.command != "record" or args.out is None:
        parser.error("record --out DIR, or --compare A B")
    record(args.out, requests=args.requests, only=args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
