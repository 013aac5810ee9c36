"""The JGroups 3 systems (orchestration/systems/jgroups5.py's 3.x entries, the member chaosbed.jgroups3) on real
members in network namespaces: `chaosbed conform` passes on each; each release's history carries its own protocols'
seqnos and conn_ids (UNICAST2 on 3.2.7, UNICAST3 on 3.3.0, 3.5.0 and 3.6.0, NAKACK2 on all), and `stop`/`stats` have
the jar's managed attributes and the taps' counts; a split writes suspects and its heal a merge view naming the two
subgroups it merged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestration.systems import SYSTEMS
from orchestration.systems.conform import ITEMS, Checklist
from tests.foreign.jgroups_clusters import (
    NETNS_MISSING,
    JGroupsClusters,
    events,
    history,
    skip_unless,
    system,
    wait_for,
    wait_tasks,
    wait_view,
)

pytestmark = [
    pytest.mark.jgroups,
    pytest.mark.netns,
    pytest.mark.slow,
    pytest.mark.skipif(bool(NETNS_MISSING), reason=str(NETNS_MISSING)),
    skip_unless("jgroups-3-unicast2"),
]
THREE = ["jgroups-3-unicast2", "jgroups-3-unicast3"]
# (system, release) -> the unicast protocol whose seqnos the history carries
RELEASES = {
    ("jgroups-3-unicast2", "3.2.7"): "UNICAST2",
    ("jgroups-3-unicast2", "3.6.0"): "UNICAST2",
    ("jgroups-3-unicast3", "3.3.0"): "UNICAST3",
    ("jgroups-3-unicast3", "3.5.0"): "UNICAST3",
    ("jgroups-3-unicast3", "3.6.0"): "UNICAST3",
}


@pytest.fixture
def jclusters(tmp_path: Path) -> Iterator[JGroupsClusters]:
    made = JGroupsClusters(tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("name", THREE)
def test_conform_passes_on_every_3x_system(tmp_path: Path, name: str) -> None:
    items = Checklist(SYSTEMS[name], "netns", tmp_path / "conform").run()
    assert {i.key: i.ok for i in items} == dict.fromkeys(ITEMS, True), "\n".join(
        f"{i.key}: {i.ok} {i.reason}" for i in items
    )
    assert "no suspicion" in next(i for i in items if i.key == "leave").reason


@pytest.mark.parametrize(("name", "release"), list(RELEASES), ids=[f"{n}-{r}" for n, r in RELEASES])
def test_each_release_logs_its_own_protocols_seqnos(jclusters: JGroupsClusters, name: str, release: str) -> None:
    unicast = RELEASES[(name, release)]
    c = jclusters.start(system(name, version=release), ["A", "B"], "netns")
    c.control("A", "send", to="B", count=10, size=200)
    c.control("B", "multicast", count=10, size=200)
    wait_tasks(c, "A")
    wait_tasks(c, "B")
    wait_for(lambda: len(events(c, "B", "deliver", sender="A", kind="unicast")) == 10, 20, "B to get A's unicasts")
    wait_for(lambda: len(events(c, "A", "deliver", sender="B", kind="multicast")) == 10, 20, "A to get B's multicasts")
    start = history(c, "A")[0]
    assert (start["release"], start["transport"]) == (release, "udp")
    assert start["stack"] == f"jgroups-{release}/{SYSTEMS[name].stack}"
    sent = {e["msg_id"]: (e["conn_id"], e["seqno"]) for e in events(c, "A", "send", kind="unicast")}
    assert len(sent) == 10 and all(conn is not None and seqno > 0 for conn, seqno in sent.values())
    assert {e["msg_id"]: (e["conn_id"], e["seqno"]) for e in events(c, "B", "deliver", sender="A")} == sent
    seqnos = sorted(seqno for _, seqno in sent.values())
    assert seqnos == list(range(seqnos[0], seqnos[0] + 10))  # one connection, consecutive
    msent = {e["msg_id"]: e["seqno"] for e in events(c, "B", "send", kind="multicast")}
    assert len(msent) == 10 and all(s > 0 for s in msent.values())
    assert {e["msg_id"]: e["seqno"] for e in events(c, "A", "deliver", sender="B", kind="multicast")} == msent
    counters = c.control("A", "stats")["counters"]
    assert (counters["member"]["unicast_protocol"], counters["member"]["multicast_protocol"]) == (unicast, "NAKACK2")
    assert counters["member"]["release"] == release
    assert counters["wire"][unicast]["sent"]["DATA"] >= 10 and counters["wire"]["NAKACK2"]["received"]["MSG"] >= 10
    assert counters[unicast]["num_messages_sent"] >= 10  # the jar's own managed attribute
    c.stop_members()
    stop = history(c, "B")[-1]
    assert stop["event"] == "stop" and stop["counters"]["member"]["delivered"] >= 20


def test_a_split_writes_suspects_and_its_heal_a_merge_view(jclusters: JGroupsClusters) -> None:
    """C is cut off from A and B: both sides install views of their own after suspecting the others; after the heal
    MERGE3 merges them into a MergeView naming the two subgroups it merged, which every member logs."""
    c = jclusters.start("jgroups-3-unicast3", ["A", "B", "C"], "netns")
    split = c.chaos.add("split", {"groups": [["A", "B"], ["C"]]})
    wait_view(c, ["A", "B"], timeout=20)
    wait_view(c, ["C"], timeout=20)
    assert events(c, "A", "suspect", peer="C") and events(c, "C", "suspect", peer="A")
    c.chaos.remove([split.id])
    view = c.wait_for_view(timeout=30)
    assert view["merge"] is True
    for name in ("A", "B", "C"):
        merge = events(c, name, "view", view_id=view["view_id"])
        assert len(merge) == 1 and merge[0]["merge"] is True and len(merge[0]["merged_from"]) == 2, merge
    c.stop_members()
    assert history(c, "A")[-1]["counters"]["member"]["suspects"] >= 1
