"""node/workload.py: the one workload generator (paced, or as fast as flow control allows), without any I/O."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest

from node.payload import make_payload
from node.stack import build_stack
from node.workload import BURST, MAX_UNACKED, POLL, Workload


def run_paced(w: Workload, until: float) -> list[tuple[float, int]]:
    """Calls the task at each of its wakeups up to `until`; returns (time, how many were due)."""
    steps = []
    while (t := w.next_wakeup()) <= until and not w.done:
        steps.append((t, w.due(t)))
    return steps


def test_paced_message_i_is_due_at_start_plus_i_over_rate() -> None:
    w = Workload("unicast", "B", 5, rate=100.0, start=1.0)
    assert w.progress == {"kind": "unicast", "dest": "B", "count": 5, "sent": 0, "done": False}
    assert w.next_wakeup() == 1.0
    assert w.due(0.5) == 0 and w.next_wakeup() == 1.0  # before its start nothing is due
    assert w.due(1.0) == 1 and w.next_wakeup() == pytest.approx(1.01)
    assert w.due(1.0099) == 0
    assert w.due(1.035) == 3  # a late caller gets the backlog at once: #1, #2, #3 (due at 1.01, 1.02, 1.03)
    assert w.progress["sent"] == 4 and not w.done
    assert w.next_wakeup() == pytest.approx(1.04)
    assert w.due(100.0) == 1  # never more than count
    assert w.done and w.progress == {"kind": "unicast", "dest": "B", "count": 5, "sent": 5, "done": True}
    assert w.next_wakeup() == math.inf and w.due(200.0) == 0


@pytest.mark.parametrize(("rate", "start"), [(1000.0, 0.0), (3.0, 0.1), (7.0, 0.3), (20_000.0, 1.7), (333.0, 2.0)])
def test_paced_wakeups_each_send_exactly_one_message(rate: float, start: float) -> None:
    """A driver that wakes at next_wakeup() (the simulator) sends one message per wakeup, at start + i/rate, with
    no empty wakeup: the due count and the wakeup times come from the same expression."""
    count = 500
    w = Workload("multicast", None, count, rate=rate, start=start)
    steps = run_paced(w, math.inf)
    assert [n for _, n in steps] == [1] * count
    assert [t for t, _ in steps] == [start + i / rate for i in range(count)]
    assert w.done


def test_granularity_bounds_the_wakeup_rate_and_keeps_the_pace() -> None:
    """The real member polls every POLL seconds: at 10,000/s that is ~10 messages per wakeup."""
    w = Workload("unicast", "B", 10_000, rate=10_000.0, start=5.0, granularity=POLL)
    steps = run_paced(w, 6.01)
    assert all(b - a >= POLL - 1e-12 for (a, _), (b, _) in itertools.pairwise(steps))
    assert sum(n for _, n in steps) == 10_000 and w.done
    assert max(n for _, n in steps) <= 11


def test_without_a_rate_unicast_bursts_until_flow_control_refuses() -> None:
    w = Workload("unicast", "B", 1000)
    assert w.due(0.0, unacked=0) == BURST and w.next_wakeup() == 0.0  # after a burst: again at once
    assert w.due(0.0, unacked=MAX_UNACKED) == BURST  # up to MAX_UNACKED unacked is still fine ...
    assert w.due(0.0, unacked=MAX_UNACKED + 1) == 0  # ... more is not: wait and look again in POLL
    assert w.next_wakeup() == POLL
    assert w.due(POLL, unacked=MAX_UNACKED + 1) == 0 and w.next_wakeup() == 2 * POLL
    assert w.due(2 * POLL, unacked=10) == BURST and w.due(2 * POLL) == BURST
    assert w.progress["sent"] == 800 and not w.done
    assert w.due(3 * POLL) == 200 and w.done and w.next_wakeup() == math.inf


def test_without_a_rate_multicast_waits_while_the_protocol_is_blocked() -> None:
    w = Workload("multicast", None, 250, burst=100)
    assert w.due(1.0, blocked=True) == 0 and w.next_wakeup() == 1.0 + POLL
    assert w.due(1.001, blocked=False) == 100
    assert w.due(1.001, unacked=10**9) == 100  # unicast flow control does not hold back multicasts
    assert w.due(1.001) == 50 and w.done


def test_due_on_reads_the_flow_control_of_a_stack() -> None:
    stack = build_stack("A", "unicast3")
    w = Workload("unicast", "B", 10, burst=3, max_unacked=4)
    for _ in range(w.due_on(stack, 0.0, "B")):
        stack.send("B", make_payload("x"), 0.0)
    assert w.due_on(stack, 0.0, "B") == 3  # 3 unacked <= 4
    for _ in range(3):
        stack.send("B", make_payload("x"), 0.0)
    assert w.due_on(stack, 0.0, "B") == 0  # 6 unacked > 4: nothing until acks come
    assert w.due_on(stack, 0.0, "C") == 3  # another destination's window is its own
    blocked = SimpleNamespace(multicast_protocol=SimpleNamespace(blocked=True))
    free = SimpleNamespace(multicast_protocol=SimpleNamespace(blocked=False))
    m = Workload("multicast", None, 10, burst=4)
    assert m.due_on(blocked, 0.0) == 0 and m.due_on(free, 0.0) == 4
    paced = Workload("multicast", None, 10, rate=1.0)
    assert paced.due_on(blocked, 0.0) == 1  # a paced task does not look at flow control (as before)


def test_done_and_stop() -> None:
    empty = Workload("multicast", None, 0, rate=5.0)
    assert empty.done and empty.next_wakeup() == math.inf and empty.due(1.0) == 0
    w = Workload("unicast", "B", 100, rate=10.0)
    assert w.due(0.25) == 3
    w.stop()  # its member stopped
    assert w.done and w.progress["sent"] == 3 and w.due(10.0) == 0 and w.next_wakeup() == math.inf


@pytest.mark.parametrize(
    ("args", "kw", "match"),
    [
        (("broadcast", None, 1), {}, "kind"),
        (("unicast", None, 1), {}, "destination"),
        (("multicast", "B", 1), {}, "destination"),
        (("unicast", "B", -1), {}, "count"),
        (("unicast", "B", 1), {"size": -1}, "size"),
        (("unicast", "B", 1), {"rate": 0}, "rate"),
        (("unicast", "B", 1), {"burst": 0}, "burst"),
    ],
)
def test_bad_tasks_are_refused(args: tuple, kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Workload(*args, **kw)
