"""bench/bench_jgroups.py on equal terms, small (root, a JDK and the jar): each side does what the output says it does.
The jar's member with histories and chaosbed's member write a history line per message at every receiver (and hardly
anything else), the jar's member with `record_messages: false` none, and every side delivers all messages in every
round (a rate for each round, the per-round ratios defined)."""

from __future__ import annotations

import contextlib

import pytest

from bench import bench_jgroups
from foreign import jgroups
from tests.foreign.jgroups_clusters import NETNS_MISSING

pytestmark = [
    pytest.mark.netns,
    pytest.mark.jgroups,
    pytest.mark.slow,
    pytest.mark.skipif(bool(NETNS_MISSING), reason=str(NETNS_MISSING)),
    pytest.mark.skipif(jgroups.missing() is not None, reason=str(jgroups.missing())),
]


@pytest.mark.parametrize("kind", ["unicast", "multicast"])
def test_the_sides_write_the_history_lines_they_say(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    jgroups.build()
    monkeypatch.setattr(bench_jgroups.network, "SIZE", 1000)  # chaosbed's side reads its message size here
    n, repeats = 3000, 2
    with contextlib.ExitStack() as stack:
        sides = bench_jgroups.measure(kind, n, 1000, repeats, stack)
    with_lines, without, ours = (s.lines_per_message for s in sides)
    # a deliver line per message (and at most a few other events: a connection's, a view), or none of them
    assert all(1.0 <= x <= 1.01 for x in with_lines + ours), (with_lines, ours)
    assert all(x <= 0.01 for x in without), without
    assert all(len(s.rates) == repeats and min(s.rates) > 0 for s in sides)
    assert bench_jgroups.ratio("test", sides[2].rates, sides[0].rates, None) > 0
