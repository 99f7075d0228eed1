"""Run untrusted Python (a model's answer plus a task's unit tests) in a contained subprocess.

The answer is hostile input: it may loop, fork, allocate without bound, print without end, try
the network or read secrets. Each layer below stops one of these; none relies on the answer's
good will, and the caller always gets a result within ``timeout_s`` (plus the time to reap).

- **Interpreter**: ``python -I -S`` (isolated: no user site, no ``PYTHON*`` variables, no script
  directory on ``sys.path``; no ``site``): only the standard library.
- **Environment**: empty (``env={}``): no secrets, no ``DATABASE_URL``, no tokens.
- **Working directory**: a fresh temporary directory, removed afterwards.
- **Limits** (``resource.setrlimit`` in ``preexec_fn``): CPU seconds, address space, file size
  (which also caps the captured stdout/stderr files), open files, no core files, and a small
  ``RLIMIT_NPROC``. The kernel ignores ``RLIMIT_NPROC`` for root, so a root worker drops the
  child to ``nobody`` first (with an interpreter ``nobody`` can read).
- **Wall clock**: the child leads its own session; at the deadline, and after every run, its
  whole process group gets SIGKILL.
- **Network**: a fresh network namespace (``unshare(CLONE_NEWNET)``, with a new user namespace
  when not root) holds only a down loopback: nothing is reachable. Where the kernel refuses
  namespaces the audit hook below is the only barrier; :func:`network_isolation` says which.
- **Audit hook** (always, installed before the answer's first line and impossible to remove from
  Python): sockets, process creation (fork, exec, spawn, subprocess, system), signals to other
  processes, ``ctypes``, ``_posixsubprocess`` and opening anything under ``/proc`` (another process's environment)
  raise ``PermissionError``.

Pass = exit status 0 *and* a per-run random marker printed after the tests: an answer that
exits early (``sys.exit(0)``, ``os._exit(0)``) before the tests ran does not pass.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import resource
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
NOBODY = 65534

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MEMORY_BYTES = 512 * 1024 * 1024
DEFAULT_OUTPUT_BYTES = 64 * 1024
MAX_PROCESSES = 8
MAX_OPEN_FILES = 64

GUARD = '''\
import os as _sandbox_os, sys as _sandbox_sys
def _sandbox_guard(event, args):
    if event in {blocked!r} or (event == "import" and args[0] in ("ctypes", "_ctypes", "_posixsubprocess")) or (
        event == "open" and isinstance(args[0], (str, bytes, _sandbox_os.PathLike))
        and _sandbox_os.path.realpath(_sandbox_os.fsdecode(args[0])).startswith("/proc")
    ):
        raise PermissionError("sandbox: " + event + " is not allowed")
_sandbox_sys.addaudithook(_sandbox_guard)
del _sandbox_guard
'''
BLOCKED_EVENTS = frozenset(
    {
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.exec",
        "os.spawn",
        "os.system",
        "os.kill",
        "os.killpg",
        "subprocess.Popen",
        "ctypes.dlopen",
        "pty.spawn",
    }
)


@dataclass(frozen=True)
class SandboxResult:
    """What one contained run did. ``passed``: exit 0 and the marker printed."""

    passed: bool
    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    duration_s: float

    @property
    def reason(self) -> str | None:
        if self.passed:
            return None
        if self.timed_out:
            return "tests timed out"
        tail = self.stderr.strip().splitlines()[-1:] or [f"exit status {self.returncode}"]
        return f"tests failed: {tail[0][:200]}"


def _world_readable(path: str) -> bool:
    """True when ``nobody`` can execute ``path``: every parent directory o+x, the file o+rx."""
    real = Path(os.path.realpath(path))
    try:
        if (real.stat().st_mode & (stat.S_IROTH | stat.S_IXOTH)) != (stat.S_IROTH | stat.S_IXOTH):
            return False
        return all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)
    except OSError:
        return False


@functools.lru_cache(maxsize=1)
def _interpreter() -> tuple[str, bool]:
    """(python executable, drop to nobody). Root drops privileges so RLIMIT_NPROC applies; that
    needs an interpreter ``nobody`` can run (the worker's own, else the system's)."""
    if os.geteuid() != 0:
        return sys.executable, False
    for candidate in (os.path.realpath(sys.executable), shutil.which("python3") or "", "/usr/bin/python3"):
        if candidate and _world_readable(candidate):
            return candidate, True
    return sys.executable, False


def _libc_unshare(flags: int) -> bool:
    name = ctypes.util.find_library("c")
    if not name:
        return False
    libc = ctypes.CDLL(name, use_errno=True)
    return libc.unshare(flags) == 0


def _preexec(*, cpu_s: int, memory_bytes: int, output_bytes: int, drop: bool) -> None:
    """In the child, before exec: limits, a private network namespace, then (root) ``nobody``."""
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (output_bytes, output_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_OPEN_FILES, MAX_OPEN_FILES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (MAX_PROCESSES, MAX_PROCESSES))
    if os.geteuid() == 0:
        _libc_unshare(CLONE_NEWNET)
    else:
        _libc_unshare(CLONE_NEWUSER | CLONE_NEWNET)
    if drop:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_python(
    program: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    output_bytes: int = DEFAULT_OUTPUT_BYTES,
    marker: str | None = None,
) -> SandboxResult:
    """Run ``program`` contained (see the module docstring). When ``marker`` is given the program
    must print it (the caller appends the print after its tests) for ``passed``; without one,
    exit status 0 is enough."""
    python, drop = _interpreter()
    work = Path(tempfile.mkdtemp(prefix="specreview-sandbox-"))
    capture = Path(tempfile.mkdtemp(prefix="specreview-capture-"))
    try:
        if drop:
            os.chown(work, NOBODY, NOBODY)
        source = work / "main.py"
        source.write_text(GUARD.format(blocked=set(BLOCKED_EVENTS)) + program, encoding="utf-8")
        source.chmod(0o444)
        out_path, err_path = capture / "stdout", capture / "stderr"
        start = time.monotonic()
        timed_out = False
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                [python, "-I", "-S", "-B", str(source)],
                cwd=work,
                env={},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
                preexec_fn=functools.partial(
                    _preexec,
                    # Above the wall-clock timeout: a single thread cannot use more CPU than wall time,
                    # so the timeout fires first and says why; the CPU limit stops a many-threaded answer.
                    cpu_s=int(timeout_s + 0.999) + 2,
                    memory_bytes=memory_bytes,
                    output_bytes=output_bytes,
                    drop=drop,
                ),
            )
            try:
                returncode: int | None = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc.pid)
                proc.wait()
                returncode = None
            finally:
                _kill_group(proc.pid)  # whatever the answer left behind in its group
        duration = time.monotonic() - start
        stdout = out_path.read_bytes()[:output_bytes].decode("utf-8", "replace")
        stderr = err_path.read_bytes()[:output_bytes].decode("utf-8", "replace")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(capture, ignore_errors=True)
    ok = returncode == 0 and not timed_out and (marker is None or marker in stdout.splitlines())
    return SandboxResult(ok, returncode, timed_out, stdout, stderr, duration)


def new_marker() -> str:
    """A random line the tests print last; the answer cannot know it in advance."""
    return f"specreview-tests-passed-{secrets.token_hex(16)}"


@functools.lru_cache(maxsize=1)
def network_isolation() -> str:
    """``"namespace"`` when sandboxed code runs in its own network namespace here, else
    ``"audit hook"`` (sockets are then refused only by the audit hook)."""
    parent = os.readlink("/proc/self/ns/net")
    python, drop = _interpreter()
    out = subprocess.run(
        [python, "-I", "-S", "-c", "import os; print(os.readlink('/proc/self/ns/net'))"],
        env={},
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=functools.partial(
            _preexec, cpu_s=5, memory_bytes=DEFAULT_MEMORY_BYTES, output_bytes=DEFAULT_OUTPUT_BYTES, drop=drop
        ),
    )
    child = out.stdout.strip()
    return "namespace" if child and child != parent else "audit hook"
