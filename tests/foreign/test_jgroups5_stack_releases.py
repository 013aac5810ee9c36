"""Each shipped stack of the JGroups 5 member (foreign/jgroups/stacks5/) starts on the oldest and the newest release
its span claims (foreign/jgroups/releases.py STACK_SPANS, what `chaosbed systems` prints): two members in network
namespaces form one view, and a unicast and a multicast each way are delivered, with the release in the history. A
stack that names an attribute a release lacks ends the member at start (JGroups' "properties ... are not
recognized"), so an honest span is what this holds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from foreign.jgroups import jgroups5
from foreign.jgroups.releases import NEWEST, STACK_SPANS, Release, Span
from orchestration.systems import SYSTEMS
from orchestration.systems.jgroups5 import with_release, with_stack
from tests.foreign.jgroups_clusters import (
    NETNS_MISSING,
    JGroupsClusters,
    events,
    history,
    skip_unless,
    wait_for,
    wait_tasks,
)

pytestmark = [
    pytest.mark.jgroups,
    pytest.mark.netns,
    pytest.mark.slow,
    pytest.mark.skipif(bool(NETNS_MISSING), reason=str(NETNS_MISSING)),
    skip_unless("jgroups-5-udp"),
]


def _ends(span: Span) -> tuple[str, str]:
    return span.first, span.last or NEWEST


CASES = [
    pytest.param(stack, release, id=f"{stack}-{release}")
    for stack in jgroups5.STACKS
    for release in _ends(STACK_SPANS[stack.removesuffix("-fast")])
]


@pytest.fixture
def jclusters(tmp_path: Path) -> Iterator[JGroupsClusters]:
    made = JGroupsClusters(tmp_path)
    try:
        yield made
    finally:
        made.close()


def test_every_stack_has_a_span_and_both_ends_are_tested() -> None:
    """Every stack of the 5.x member has a span of 5.x releases (the 3.x member's stacks have spans of their own)."""
    spans5 = {stack for stack, span in STACK_SPANS.items() if Release.parse(span.first).major == 5}
    assert {s.removesuffix("-fast") for s in jgroups5.STACKS} == spans5
    assert len(CASES) == 2 * len(jgroups5.STACKS)


@pytest.mark.parametrize(("stack", "release"), CASES)
def test_the_stack_starts_on_the_ends_of_its_span(jclusters: JGroupsClusters, stack: str, release: str) -> None:
    system = with_stack(with_release(SYSTEMS["jgroups-5"], release), stack)
    c = jclusters.start(system, ["A", "B"], "netns")
    start = history(c, "A")[0]
    assert (start["release"], start["stack"]) == (release, f"jgroups-{release}/{stack}")
    c.control("A", "send", to="B", count=3, size=100)
    c.control("B", "multicast", count=3, size=100)
    wait_tasks(c, "A")
    wait_tasks(c, "B")
    wait_for(lambda: len(events(c, "B", "deliver", sender="A", kind="unicast")) == 3, 20, "B to get A's unicasts")
    wait_for(lambda: len(events(c, "A", "deliver", sender="B", kind="multicast")) == 3, 20, "A to get B's multicasts")
