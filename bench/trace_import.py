"""Benchmark: import a generated native JSONL trace into the configured database (Postgres for the target).

    DATABASE_URL=postgres://... .venv/bin/python bench/trace_import.py [--requests 100000] [--sizes 20000,100000]
        [--repeat 3] [--baseline ../older-checkout]

Each size is imported in a fresh child process, which reports requests/s (wall clock, from opening the
file to the committed transaction, including hashing, validation and the sort check) and its peak RSS
(MiB, from getrusage). Peak RSS that stays flat as the file grows shows the parse streams. Target:
>= 20,000 requests/s for 100,000 requests (the median of ``--repeat`` runs). ``--baseline DIR`` runs
another checkout's importer interleaved with this one on the same files and prints the ratio: on a
shared machine the ratio holds where the absolute rate moves with the load. The imported traces are
deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS = ["chat", "code", "math", "translation", "json", "tool_call", "summarization"]
WORDS = (
    "the of and to in is for that with on as by this be are from at or an it was which model token".split()
)


def generate(path: Path, n: int, seed: int = 0) -> int:
    """Write ``n`` native requests (about 400 bytes each) sorted by arrival; returns the file size (bytes)."""
    rng = random.Random(seed)
    t = 0.0
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            t += rng.expovariate(50.0)
            text = " ".join(rng.choices(WORDS, k=rng.randint(20, 60)))
            request = {
                "id": f"req-{i:07d}",
                "arrival_s": round(t, 6),
                "messages": [
                    {"role": "system", "content": "You are helpful."},
                    {"role": "user", "content": text},
                ],
                "max_tokens": rng.choice([32, 64, 128, 256, 512]),
                "temperature": rng.choice([0.0, 0.7, 1.0]),
                "task": rng.choice(TASKS),
                "class": "batch" if rng.random() < 0.2 else "interactive",
                "metadata": {"tenant": f"t{rng.randint(1, 20)}"},
            }
            fh.write(json.dumps(request) + "\n")
    return path.stat().st_size


def _self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _proc_cpu_s(pid: int | None) -> float | None:
    """CPU seconds used so far by a local process (the Postgres backend), or None where unreadable."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child(path: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.db import connection

    from console.traces.services import trace_delete, trace_import_path

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    server_pid = None
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            server_pid = cursor.fetchone()[0]
    server_before = _proc_cpu_s(server_pid)
    cpu_before = _self_cpu_s()
    start = time.perf_counter()
    result = trace_import_path(path=path, name="bench", uploaded_by=None, seed=int(time.time()))
    elapsed = time.perf_counter() - start
    cpu = _self_cpu_s() - cpu_before
    server_after = _proc_cpu_s(server_pid)
    server_cpu = (
        server_after - server_before if server_after is not None and server_before is not None else None
    )
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    trace = result.trace
    print(
        json.dumps(
            {
                "requests": trace.request_count,
                "seconds": round(elapsed, 3),
                "requests_per_s": round(trace.request_count / elapsed),
                "rss_before_mib": round(rss_before, 1),
                "rss_peak_mib": round(rss_peak, 1),
                "client_cpu_s": round(cpu, 3),
                "server_cpu_s": None if server_cpu is None else round(server_cpu, 3),
                "load_average": os.getloadavg()[0],
                "database": connection.vendor,
            }
        )
    )
    trace_delete(trace=trace)


def _run_child(script: Path, path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, str(script), "--child", str(path)],
        cwd=script.parent.parent,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stdout + out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument(
        "--sizes", default="", help="comma-separated sizes to compare (default: 20000 and --requests)"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="imports per size (fresh process each); the median is reported"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (e.g. a git worktree of an older commit): its importer runs interleaved with "
        "this one on the same files, so a loaded machine slows both alike",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s] or sorted({20_000, args.requests})
    trees = [("this", Path(__file__).resolve())]
    if args.baseline:
        trees.append(("baseline", args.baseline.resolve() / "bench" / "trace_import.py"))
    medians: dict[tuple[str, int], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"trace-{n}.jsonl"
            size = generate(path, n)
            runs: dict[str, list[dict]] = {label: [] for label, _ in trees}
            for _ in range(max(1, args.repeat)):
                for label, script in trees:
                    try:
                        result = _run_child(script, path)
                    except RuntimeError as exc:
                        print(exc, file=sys.stderr)
                        return 1
                    result["file_mib"] = round(size / 2**20, 1)
                    runs[label].append(result)
                    _print(label, result)
            for label, results in runs.items():
                medians[(label, n)] = {
                    "requests": n,
                    "requests_per_s": _median([r["requests_per_s"] for r in results]),
                    "client_cpu_s": _median([r["client_cpu_s"] for r in results]),
                    "server_cpu_s": _median([r["server_cpu_s"] or 0.0 for r in results]),
                    "rss_peak_mib": max(r["rss_peak_mib"] for r in results),
                    "load_average": _median([r["load_average"] for r in results]),
                }
    big = max(sizes)
    if args.repeat > 1 or args.baseline:
        for (label, n), m in medians.items():
            print(
                f"median of {max(1, args.repeat)} [{label}] {n:,} requests: {m['requests_per_s']:,.0f} requests/s, "
                f"importer CPU {m['client_cpu_s']:.2f} s, Postgres backend CPU {m['server_cpu_s']:.2f} s, "
                f"peak RSS {m['rss_peak_mib']:.0f} MiB, load average {m['load_average']:.1f} on {os.cpu_count()} cores"
            )
        if args.baseline:
            ours, theirs = medians[("this", big)], medians[("baseline", big)]
            print(
                f"this / baseline at {big:,}: requests/s x{ours['requests_per_s'] / theirs['requests_per_s']:.2f}, "
                f"importer CPU x{ours['client_cpu_s'] / theirs['client_cpu_s']:.2f}"
            )
    rate = medians[("this", big)]["requests_per_s"]
    ok = rate >= 20_000
    print(f"target >= 20,000 requests/s at {big:,}: {'met' if ok else 'NOT met'} ({rate:,.0f})")
    return 0


def _print(label: str, result: dict) -> None:
    print(
        f"[{label}] {result['requests']:>8,} requests  {result['file_mib']:>6.1f} MiB file  {result['seconds']:>6.2f} s  "
        f"{result['requests_per_s']:>7,} requests/s  peak RSS {result['rss_peak_mib']:.0f} MiB "
        f"(after Django start {result['rss_before_mib']:.0f} MiB)  [{result['database']}]"
    )
    busy = result["client_cpu_s"] + (result["server_cpu_s"] or 0)
    print(
        f"{'':>10}CPU: importer {result['client_cpu_s']:.2f} s, Postgres backend "
        f"{result['server_cpu_s'] if result['server_cpu_s'] is not None else 'n/a'} s, "
        f"= {result['requests'] / busy:,.0f} requests per CPU-second; load average {result['load_average']:.1f} "
        f"on {os.cpu_count()} cores"
    )


if __name__ == "__main__":
    sys.exit(main())
