"""Keeping send times: sleeping to a target time, and the thread's scheduler slice.

An open-loop load generator must send on time: the loop's timers wake up to 1 ms late, so the
replay sleeps until shortly before a send time and then yields to the loop until it is reached,
and during the window it asks Linux for a short scheduler slice so that it runs soon after it
wakes, even on a busy host.
"""

from __future__ import annotations

import asyncio
import ctypes
import platform
import sys
import time

# Sleep until this long before a send time, then yield to the loop until it is reached: the
# loop's timers wake up to 1 ms late (epoll's timeout is rounded up to whole milliseconds).
# Just over 1 ms: a longer spin measured no better and burned twice the CPU on 2 cores.
SPIN_S = 0.0012
# The replay thread's scheduler slice during the window (see sched_slice_set).
LATENCY_SLICE_S = 0.0001
TICK_S = 0.5  # how often progress is reported and cancellation checked (seconds)


class _SchedAttr(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("sched_policy", ctypes.c_uint32),
        ("sched_flags", ctypes.c_uint64),
        ("sched_nice", ctypes.c_int32),
        ("sched_priority", ctypes.c_uint32),
        ("sched_runtime", ctypes.c_uint64),
        ("sched_deadline", ctypes.c_uint64),
        ("sched_period", ctypes.c_uint64),
        ("sched_util_min", ctypes.c_uint32),
        ("sched_util_max", ctypes.c_uint32),
    ]


_SCHED_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}  # sched_setattr, sched_getattr


def sched_slice_set(*, slice_s: float) -> float | None:
    """Ask Linux's EEVDF scheduler (6.12+) for a short time slice for the calling thread.

    A thread with a short slice gets an early deadline, so it runs soon after it wakes even
    when the CPUs are busy: on a loaded 2-core host a sleeping event loop's p99 wake-up delay
    fell from 0.9 ms to 0.15 ms with 0.1 ms (the replay's own send tails under load, which
    spin the last 1.2 ms, showed no measurable change either way). Returns the previous slice (seconds; 0 for the
    default) to restore, or None where the kernel or platform does not take the request.
    """
    numbers = _SCHED_SYSCALLS.get(platform.machine())
    if sys.platform != "linux" or numbers is None:
        return None
    setattr_nr, getattr_nr = numbers
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        current = _SchedAttr()
        if libc.syscall(getattr_nr, 0, ctypes.byref(current), ctypes.sizeof(_SchedAttr), 0) != 0:
            return None
        if current.sched_policy != 0:  # only SCHED_OTHER threads have a fair-share slice
            return None
        wanted = _SchedAttr(
            size=ctypes.sizeof(_SchedAttr),
            sched_policy=0,
            sched_nice=current.sched_nice,
            sched_runtime=int(slice_s * 1e9),
        )
        if libc.syscall(setattr_nr, 0, ctypes.byref(wanted), 0) != 0:
            return None
        return current.sched_runtime / 1e9
    except (OSError, AttributeError):
        return None


async def sleep_until(target: float, *, stop: asyncio.Event) -> None:
    """Return at ``target`` (a perf_counter time, seconds) or as soon as ``stop`` is set: sleep
    until ``SPIN_S`` before it, then yield to the loop until it is reached."""
    while not stop.is_set():
        remaining = target - time.perf_counter()
        if remaining <= 0:
            return
        if remaining > SPIN_S:
            # In slices, so that a cancellation is seen within a tick even before a long gap.
            await asyncio.sleep(min(remaining - SPIN_S, TICK_S))
        else:
            await asyncio.sleep(0)
