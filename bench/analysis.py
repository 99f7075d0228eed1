"""How long the comparison takes: 9 runs x 10,000 requests of synthetic results in Postgres.

Prints the cold compute time (DataFrame load + every metric, interval and knee) and the warm
page render time (cached summary -> HTML), with the row counts. What the worker does as each run
ends (the run's results pack and a baseline run's fit facts) is timed apart, before the cold
figure, as is the one-time import of the comparison modules. Targets: cold < 5 s, warm
render < 300 ms. Each figure is wall-clock, with this process's CPU time beside it and the
machine's load average (a shared machine stretches wall-clock time, not CPU time). Uses
DATABASE_URL (a Postgres database it creates and drops: <name>_bench_analysis).

    .venv/bin/python bench/analysis.py [--requests 10000] [--n-boot 1000] [--cold-runs 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=10_000, help="requests per run (9 runs)")
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--cold-runs", type=int, default=3, help="cold computations (the median is reported)")
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/specreview")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import setup_databases, teardown_databases

    settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = (
        settings.DATABASES["default"]["NAME"] + "_bench_analysis"
    )
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    old = setup_databases(verbosity=0, interactive=False)
    try:
        from django.test import Client

        from console.accounts.services import user_create
        from console.analysis.comparison.schema import summary_load
        from console.analysis.models import ComparisonCache
        from console.analysis.services import comparison_refresh
        from console.results.models import RequestResult
        from tests.support.synthetic import experiment_synthesize

        t = time.perf_counter()
        # baseline + k=2 + k=4 at 1x, 2x, 4x, one repeat = 9 runs
        experiment = experiment_synthesize(n_requests=args.requests, ks=(2, 4), loads="1x,2x,4x", repeats=1)
        print(
            f"built {experiment.runs.count()} runs, {RequestResult.objects.count():,} request rows "
            f"in {time.perf_counter() - t:.1f} s ({connection.vendor})"
        )

        from console.analysis.selectors import experiment_finished_runs
        from console.results.selectors import results_frames

        # A worker imports these once per process (pandas, scipy.stats, plotly): timed apart, so
        # the cold figure is the computation a finished experiment asks for.
        t = time.perf_counter()
        import console.analysis.comparison  # noqa: F401
        import console.analysis.grading  # noqa: F401
        import console.analysis.quality  # noqa: F401

        print(
            f"first import of the comparison modules (once per worker process): {time.perf_counter() - t:.2f} s"
        )
        # The worker caches each baseline run's fit facts as that run finishes
        # (console.analysis.services.fit_run_summarise, announced by console.experiments.hooks): done here first and timed apart, so the cold
        # figure is what the comparison task does once the last run ends.
        from console.analysis.services import fit_runs_summarise

        t, c = time.perf_counter(), time.process_time()
        fitted = fit_runs_summarise(experiment=experiment)
        print(
            f"fit facts of {fitted} baseline runs (the worker, as each run ends): "
            f"{time.perf_counter() - t:.2f} s (CPU {time.process_time() - c:.2f} s)"
        )
        # The worker also packs each run's rows into one value as the run ends
        # (console.results.services.results_pack_store): done here first and timed apart.
        from console.results.services import results_packs_store

        t, c = time.perf_counter(), time.process_time()
        packed = results_packs_store(experiment=experiment)
        print(
            f"results packs of {packed} runs (the worker, as each run ends): "
            f"{time.perf_counter() - t:.2f} s (CPU {time.process_time() - c:.2f} s)"
        )
        print(f"load average before: {_load()}")
        t, c = time.perf_counter(), time.process_time()
        frames = results_frames(runs=experiment_finished_runs(experiment=experiment))
        load, load_cpu = time.perf_counter() - t, time.process_time() - c
        print(
            f"  of which loading {len(frames[0]):,} rows from the database: {load:.2f} s (CPU {load_cpu:.2f} s)"
        )
        del frames
        # The cold figure is the median of --cold-runs computations, each from the database with
        # no stored comparison: on a shared 2-core VM one computation varies by +-20%.
        colds = []
        for i in range(args.cold_runs):
            ComparisonCache.objects.all().delete()
            t, c = time.perf_counter(), time.process_time()
            summary = comparison_refresh(experiment_id=experiment.pk, n_boot=args.n_boot, force=True)
            colds.append((time.perf_counter() - t, time.process_time() - c))
            print(f"  cold computation {i + 1}: {colds[-1][0]:.2f} s (CPU {colds[-1][1]:.2f} s)")
        cold, cold_cpu = sorted(colds)[len(colds) // 2]
        stored = summary_load(summary)
        print(
            f"cold comparison: {cold:.2f} s, CPU {cold_cpu:.2f} s, median of {len(colds)}  (target < 5 s; "
            f"{len(stored.headline)} headline rows, {len(stored.slices)} slice rows, n_boot={args.n_boot})"
        )

        user = user_create(username="bench", password="bench-password", role="viewer")
        client = Client()
        client.force_login(user)
        url = f"/analysis/experiments/{experiment.pk}/"
        client.get(url)  # warm the cache and the template loader
        times, cpu_times = [], []
        for _ in range(5):
            t, c = time.perf_counter(), time.process_time()
            response = client.get(url)
            times.append(time.perf_counter() - t)
            cpu_times.append(time.process_time() - c)
            assert response.status_code == 200
        warm, warm_cpu = sorted(times)[len(times) // 2], sorted(cpu_times)[len(cpu_times) // 2]
        print(
            f"warm page render: {warm * 1000:.0f} ms, CPU {warm_cpu * 1000:.0f} ms, median of 5  "
            f"(target < 300 ms; {len(response.content):,} bytes)"
        )
        print(f"ratios: cold/target = {cold / 5:.2f}, warm/target = {warm / 0.3:.2f}")
        print(f"load average after: {_load()} on {os.cpu_count()} cores")
        call_command("flush", verbosity=0, interactive=False)
    finally:
        teardown_databases(old, verbosity=0)


if __name__ == "__main__":
    main()
