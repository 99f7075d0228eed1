"""interrupt_signals: SIGINT, SIGTERM and SIGHUP become ``Interrupted``; ignored ones stay ignored."""

from __future__ import annotations

import os
import signal

import pytest

from workers.embedded import Interrupted, interrupt_signals


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_it_turns_a_stop_signal_into_interrupted_and_restores_the_handler(sig):
    # A process a non-interactive shell started in the background inherits SIGINT ignored, and
    # ignored signals stay ignored (below): the test starts from Python's own default handler.
    original = signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    try:
        before = signal.getsignal(sig)
        with pytest.raises(Interrupted) as caught:
            with interrupt_signals():
                os.kill(os.getpid(), sig)
                for _ in range(100):  # the handler runs between bytecodes
                    pass
        assert caught.value.signum == sig and caught.value.signame == sig.name
        assert signal.getsignal(sig) == before
    finally:
        signal.signal(sig, original)


def test_it_leaves_an_ignored_signal_ignored():
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup does
    try:
        with interrupt_signals():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)  # would raise Interrupted if handled
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
