"""The code sandbox contains hostile answers: each returns within its timeout, leaves nothing
running, and is graded wrong. The answers run for real against a real HumanEval problem."""

import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from console.analysis.grading import grade_code, reference_of
from console.analysis.sandbox import MAX_PROCESSES, network_isolation, new_marker, run_python
from tests.conftest import SHARED_DATA

HUMANEVAL = SHARED_DATA / "prompts/humaneval/HumanEval.jsonl"
TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def problem():
    item = json.loads(HUMANEVAL.read_text().splitlines()[0])  # has_close_elements
    ref = reference_of({"test": item["test"], "entry_point": item["entry_point"]}, prompt=item["prompt"])
    return ref, item["canonical_solution"]


def _sandbox_processes() -> int:
    """Processes still running a sandboxed program (their command line names its directory)."""
    count = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if b"specreview-sandbox-" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    count += 1
            except OSError:
                pass
    return count


def _graded(problem, body: str) -> tuple[bool | None, str | None, float]:
    ref, _ = problem
    start = time.monotonic()
    correct, reason = grade_code(
        body, test=ref["test"], entry_point=ref["entry_point"], prompt=ref["prompt"], timeout_s=TIMEOUT_S
    )
    elapsed = time.monotonic() - start
    assert elapsed < TIMEOUT_S + 3, f"took {elapsed:.1f}s"
    assert _sandbox_processes() == 0
    return correct, reason, elapsed


def test_it_passes_the_canonical_solution(problem):
    correct, reason, _ = _graded(problem, problem[1])
    assert correct is True and reason is None


def test_it_blocks_the_network(problem):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(TIMEOUT_S + 2)
    port = server.getsockname()[1]
    accepted: list[object] = []

    def accept():
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    body = (
        "    import socket\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'leak')\n"
        + problem[1]
    )
    correct, reason, _ = _graded(problem, body)
    thread.join()
    server.close()
    assert accepted == []
    assert correct is False and "not allowed" in reason
    assert network_isolation() in ("namespace", "audit hook")


def test_it_hides_the_environment(problem, monkeypatch):
    monkeypatch.setenv("SPECREVIEW_FAKE_SECRET", "hunter2-do-not-leak")
    program = (
        "import os\n"
        "print(sorted(os.environ.items()))\n"
        "try:\n"
        "    print(open(f'/proc/{os.getppid()}/environ').read())\n"
        "except OSError as exc:\n"
        "    print('blocked', exc)\n"
    )
    result = run_python(program, timeout_s=TIMEOUT_S)
    assert "hunter2" not in result.stdout + result.stderr
    assert "SPECREVIEW_FAKE_SECRET" not in result.stdout
    # An answer right only when it can see the secret is graded wrong.
    body = "    import os\n    assert os.environ.get('SPECREVIEW_FAKE_SECRET')\n" + problem[1]
    correct, _, _ = _graded(problem, body)
    assert correct is False


def test_it_stops_an_endless_loop(problem):
    correct, reason, elapsed = _graded(problem, "    while True:\n        pass\n")
    assert correct is False and reason == "tests timed out" and elapsed >= TIMEOUT_S - 0.5


def test_it_stops_a_fork_loop(problem):
    body = "    import os\n    while True:\n        try:\n            os.fork()\n        except Exception:\n            pass\n"
    correct, _, _ = _graded(problem, body)
    assert correct is False
    body = "    import _posixsubprocess\n" + problem[1]
    assert _graded(problem, body)[0] is False


def test_it_stops_unbounded_allocation(problem):
    body = "    blocks = []\n    while True:\n        blocks.append(bytearray(50_000_000))\n"
    correct, reason, _ = _graded(problem, body)
    assert correct is False and "MemoryError" in reason


def test_it_caps_the_output(problem):
    marker = new_marker()
    result = run_python(f"while True:\n    print('x' * 10000)\nprint({marker!r})\n", timeout_s=TIMEOUT_S, marker=marker)
    assert result.passed is False and len(result.stdout) <= 64 * 1024
    assert _sandbox_processes() == 0


def test_it_runs_in_a_fresh_directory_it_cannot_escape_to_proc():
    result = run_python("import os\nprint(os.getcwd())\nprint(os.listdir('.'))\n", timeout_s=TIMEOUT_S)
    assert result.passed
    cwd, listing = result.stdout.splitlines()[:2]
    assert "specreview-sandbox-" in cwd and not os.path.exists(cwd)
    assert listing == "['main.py']"


def test_it_limits_processes_for_an_unprivileged_user():
    """RLIMIT_NPROC binds only a non-root user: the child is never root, whoever runs the worker."""
    result = run_python("import os, resource\nprint(os.getuid(), resource.getrlimit(resource.RLIMIT_NPROC)[0])\n")
    uid, nproc = map(int, result.stdout.split())
    assert uid != 0 and nproc == MAX_PROCESSES
