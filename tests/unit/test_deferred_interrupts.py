"""Taking a cluster down is not cut short by Ctrl-C: SIGINT/SIGTERM during the block wait until it is done."""

from __future__ import annotations

import os
import signal

import pytest

from orchestration.runner import deferred_interrupts


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_block_is_raised_after_it(sig: signal.Signals) -> None:
    before = signal.getsignal(sig)
    steps = []
    with pytest.raises(KeyboardInterrupt), deferred_interrupts():
        os.kill(os.getpid(), sig)  # delivered to this (main) thread at once
        steps.append("still running")
        os.kill(os.getpid(), sig)  # a second Ctrl-C changes nothing
        steps.append("done")
    assert steps == ["still running", "done"]
    assert signal.getsignal(sig) == before, "the previous handler is back"


def test_no_signal_no_interrupt() -> None:
    signals = (signal.SIGINT, signal.SIGTERM)
    before = {s: signal.getsignal(s) for s in signals}
    ran = []
    with deferred_interrupts():
        during = {s: signal.getsignal(s) for s in signals}
        ran.append("body")
    assert ran == ["body"]
    assert all(during[s] is not before[s] for s in signals), "the block defers both signals"
    assert {s: signal.getsignal(s) for s in signals} == before, "and gives the previous handlers back"
