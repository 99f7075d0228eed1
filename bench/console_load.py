"""Console under load: 50 concurrent users on gunicorn + Postgres, browsing the home page, the
lists, a 10,000-request trace, its experiment, the stored 9-run comparison (baseline + n-gram
k=2, 4 at 1x, 2x, 4x; 10,000 requests per run) whole and by a slice, a fitted policy and the
decision pages.

Self-contained: builds its data in a scratch Postgres database (<DATABASE_URL's name>_bench_load,
created and dropped), starts gunicorn on 127.0.0.1 on a free port, runs the users for a bounded
time, prints p50/p95 per page and the errors, and exits 1 on any error (a non-2xx answer or a
failed request). Target: p95 under 500 ms on every page, zero errors.

    .venv/bin/python bench/console_load.py [--requests 10000] [--users 50] [--duration 60]
        [--think 1.0] [--workers 3] [--threads 4] [--run-page]

Each user holds its own session and loops: pick a page (weights below), GET it, wait an
exponentially distributed think time (mean --think seconds; 0 = back to back).
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TARGET_P95_S = 0.5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _build(n_requests: int, users: int, run_page: bool):
    """The data and one session cookie per simulated user; returns (pages, cookies)."""
    from django.test import Client

    from console.accounts.services import user_create
    from console.analysis.selectors import comparison_summary_for_experiment
    from console.analysis.services import comparison_refresh
    from console.analysis.slice_view import slice_options
    from console.decisions import services as decisions
    from console.experiments.models import Experiment
    from console.policies.services import policy_fit
    from console.results.models import RequestResult
    from tests.support.synthetic import experiment_synthesize

    t = time.perf_counter()
    experiment = experiment_synthesize(n_requests=n_requests, ks=(2, 4), loads="1x,2x,4x", repeats=1)
    for i in range(8):  # the lists show more than one row
        experiment_synthesize(n_requests=20, ks=(2,), loads="1x", repeats=1, seed=i + 1, name=f"small-{i}")
    print(
        f"built {experiment.runs.count()} runs, {RequestResult.objects.count():,} request rows "
        f"in {time.perf_counter() - t:.1f} s"
    )
    # Refetched: the cache key includes the experiment's fields as the database returns them
    # (a freshly created instance's Decimal can print differently, and the page would miss).
    experiment = Experiment.objects.get(pk=experiment.pk)
    t = time.perf_counter()
    comparison_refresh(experiment_id=experiment.pk)  # stored, as the worker's task leaves it
    summary = comparison_summary_for_experiment(experiment=experiment)
    if summary is None:
        raise SystemExit("the comparison was not stored: the comparison page would only say 'computing'")
    print(f"comparison computed and stored in {time.perf_counter() - t:.1f} s")

    engineer = user_create(username="load-engineer", password="load-engineer-pw", role="engineer")
    approver = user_create(username="load-approver", password="load-approver-pw", role="approver")
    viewer = user_create(username="load-viewer", password="load-viewer-pw", role="viewer")
    candidate = experiment.arms.exclude(label="baseline").order_by("pk").first()
    decision = decisions.decision_create(
        experiment=experiment,
        author=engineer,
        title="Turn on n-gram speculation (load bench)",
        proposal="enable",
        candidate_arm=candidate,
        traffic_class="interactive",
        comparison=summary,
    )
    signed = None
    try:  # a signed one too, so the archive page has a chain to verify
        decision = decisions.decision_update(
            decision=decision,
            actor=engineer,
            changes={
                "rationale": "load bench",
                "checklist_answers": {
                    "production_traces": {"answer": "yes"},
                    "current_serving_path": {"answer": "yes"},
                    "framework_compatibility": {"answer": "yes"},
                },
                "rollback_owner": "on-call",
                "rollback_verification": "p95 back within 15 min",
            },
        )
        decision = decisions.decision_submit(decision=decision, actor=engineer)
        # Overridden approvals need a reason; the synthetic gate may fail, so it is signed as a rejection.
        signed = decisions.decision_sign(decision=decision, signer=approver, verdict="rejected", comment="no")
    except Exception as exc:  # the bench still measures the draft's page
        print(f"(could not sign the bench decision: {exc}; measuring the draft)")
    policy = policy_fit(experiment=experiment, created_by=engineer)
    run = experiment.runs.filter(status="done").order_by("pk").first()
    slice_key = slice_options(summary)[0]["options"][0]["key"]
    pages = {
        "home": ("/", 2),
        "experiments list": ("/experiments/", 3),
        "traces list": ("/traces/", 2),
        "trace": (f"/traces/{experiment.trace_id}/", 1),
        "decisions list": ("/decisions/", 2),
        "archive": ("/decisions/archive/", 1),
        "comparison (9 runs)": (f"/analysis/experiments/{experiment.pk}/", 3),
        "comparison, a slice": (f"/analysis/experiments/{experiment.pk}/?slice={slice_key}", 1),
        "policy": (f"/policies/{policy.pk}/", 1),
        "decision": (f"/decisions/{(signed or decision).pk}/", 2),
        "experiment": (f"/experiments/{experiment.pk}/", 1),
    }
    if run_page:  # one run's every request as a table and a timeline: 10,000 rows at full size
        pages["run (10k rows)" if n_requests >= 10_000 else "run"] = (f"/analysis/runs/{run.pk}/", 1)
    cookies = []
    for _ in range(users):
        client = Client()
        client.force_login(viewer)
        cookies.append(client.cookies["sessionid"].value)
    return pages, cookies


def _serve(db_url: str, port: int, workers: int, threads: int, log: Path) -> subprocess.Popen:
    # keep-alive longer than any think time: with gunicorn's 2 s default, a user reusing a
    # connection just as the server closes it gets "connection reset", which a browser would
    # silently retry but counts as an error here.
    env = dict(os.environ, DATABASE_URL=db_url, DEBUG="false", SPECREVIEW_ENV="development")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "gunicorn", "console.wsgi:application",
            "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--threads", str(threads),
            "--timeout", "120", "--graceful-timeout", "5", "--keep-alive", "75", "--access-logfile", "-",
        ],
        cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"gunicorn exited early:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"gunicorn did not answer /healthz in 120 s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    """Stop gunicorn and its workers (its own process group), so the database can be dropped."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass
    time.sleep(1)  # workers of the group exit right after the master


def _users(base: str, pages: dict, cookies: list[str], duration: float, think: float):
    import httpx

    names = list(pages)
    weights = [pages[n][1] for n in names]
    timings: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, list[str]] = defaultdict(list)
    lock = threading.Lock()
    stop = time.monotonic() + duration

    def user(i: int) -> None:
        rng = random.Random(i)
        with httpx.Client(base_url=base, cookies={"sessionid": cookies[i]}, timeout=60) as client:
            time.sleep(rng.uniform(0, min(2.0, duration / 10)))  # stagger the start
            while time.monotonic() < stop:
                name = rng.choices(names, weights)[0]
                t = time.perf_counter()
                try:
                    response = client.get(pages[name][0])
                    elapsed = time.perf_counter() - t
                    problem = None if response.status_code == 200 else f"HTTP {response.status_code}"
                except httpx.HTTPError as exc:
                    elapsed, problem = time.perf_counter() - t, f"{type(exc).__name__}: {exc}"
                with lock:
                    timings[name].append(elapsed)
                    if problem:
                        errors[name].append(problem)
                if think > 0:
                    time.sleep(rng.expovariate(1 / think))

    threads = [threading.Thread(target=user, args=(i,), daemon=True) for i in range(len(cookies))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(duration + 120)
    return timings, errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--requests", type=int, default=10_000, help="requests per run of the comparison (9 runs)"
    )
    parser.add_argument("--users", type=int, default=50, help="concurrent simulated users")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--think", type=float, default=1.0, help="mean think time between a user's pages (s)")
    parser.add_argument("--workers", type=int, default=3, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=4, help="threads per gunicorn worker")
    parser.add_argument(
        "--run-page",
        action="store_true",
        help="also browse a run's page (every request of the run on one page)",
    )
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/specreview")
    import django

    django.setup()
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    from django.conf import settings
    from django.db import connection
    from django.test.utils import setup_databases, teardown_databases

    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("postgresql"):
        raise SystemExit("bench/console_load.py needs DATABASE_URL=postgres://...")
    db.setdefault("TEST", {})["NAME"] = db["NAME"] + "_bench_load"
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # bench users only
    old = setup_databases(verbosity=0, interactive=False)
    proc = None
    try:
        from console.static_files import static_collect_if_stale

        static_collect_if_stale()  # the pages name content-hashed static files
        pages, cookies = _build(args.requests, args.users, args.run_page)
        cfg = connection.settings_dict
        auth = cfg["USER"] or "postgres"
        if cfg.get("PASSWORD"):
            auth += f":{cfg['PASSWORD']}"
        db_url = f"postgres://{auth}@{cfg['HOST'] or '127.0.0.1'}:{cfg['PORT'] or 5432}/{cfg['NAME']}"
        connection.close()
        port = _free_port()
        log = ROOT / "var" / "bench_console_load_gunicorn.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        proc = _serve(db_url, port, args.workers, args.threads, log)
        print(
            f"gunicorn on 127.0.0.1:{port}: {args.workers} workers x {args.threads} threads; "
            f"{args.users} users for {args.duration:.0f} s, think {args.think} s; {os.cpu_count()} CPUs, "
            f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
        )
        t = time.perf_counter()
        timings, errors = _users(f"http://127.0.0.1:{port}", pages, cookies, args.duration, args.think)
        wall = time.perf_counter() - t
    finally:
        if proc is not None:
            _stop(proc)
        connection.close()
        teardown_databases(old, verbosity=0)

    total = sum(len(v) for v in timings.values())
    n_errors = sum(len(v) for v in errors.values())
    print(f"\n{total:,} requests in {wall:.0f} s ({total / wall:.1f}/s), {n_errors} errors")
    print(f"{'page':<22}{'n':>7}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}{'errors':>8}  p95/target")
    everything: list[float] = []
    worst = 0.0
    for name in pages:
        values = timings.get(name, [])
        if not values:
            print(f"{name:<22}{0:>7}")
            continue
        everything += values
        p50, p95 = statistics.median(values), _quantile(values, 0.95)
        worst = max(worst, p95)
        print(
            f"{name:<22}{len(values):>7}{p50 * 1000:>9.0f}{p95 * 1000:>9.0f}{max(values) * 1000:>9.0f}"
            f"{len(errors.get(name, [])):>8}  {p95 / TARGET_P95_S:.2f}"
        )
    if everything:
        print(
            f"{'all pages':<22}{len(everything):>7}{statistics.median(everything) * 1000:>9.0f}"
            f"{_quantile(everything, 0.95) * 1000:>9.0f}{max(everything) * 1000:>9.0f}{n_errors:>8}  "
            f"{_quantile(everything, 0.95) / TARGET_P95_S:.2f}"
        )
    print(
        f"target: p95 < {TARGET_P95_S * 1000:.0f} ms on every page (worst {worst * 1000:.0f} ms), zero errors"
    )
    for name, problems in errors.items():
        print(f"  {name}: {len(problems)} errors, e.g. {problems[0]}")
    return 1 if n_errors or not total else 0


if __name__ == "__main__":
    sys.exit(main())
