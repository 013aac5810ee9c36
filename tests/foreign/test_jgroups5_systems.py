"""The JGroups 5 systems (orchestration/systems/jgroups5.py) on real members in network namespaces: `chaosbed conform`
passes on each; each stack's history carries its own protocols' seqnos (UNICAST3/NAKACK2 over UDP and TCP,
UNICAST4/NAKACK4, NAKACK2 without retransmission on 5.4.3); a split writes suspects and its heal a merge view with
the subgroups it merged, and the taps count the SEND_FIRST_SEQNOs and retransmissions the heal causes; the `leave`
fault is a graceful leave on both member programs (the others install a view without the member and never suspect
it); a user's own XML file runs as the stack, and one that cannot start ends `up` with exit 2 naming the file and
JGroups' reason; a member names a peer whose logical name JGroups has not learnt (the UUID carries it)."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from foreign.jgroups.maven import jar_path
from foreign.jgroups.releases import NEWEST, NOXMIT, Release
from orchestration.cluster import ClusterError
from orchestration.systems import SYSTEMS
from orchestration.systems.conform import ITEMS, Checklist
from orchestration.systems.jgroups5 import with_stack
from tests.foreign.jgroups_clusters import (
    NETNS_MISSING,
    JGroupsClusters,
    events,
    history,
    skip_unless,
    wait_for,
    wait_tasks,
    wait_view,
)

pytestmark = [
    pytest.mark.jgroups,
    pytest.mark.netns,
    pytest.mark.slow,
    pytest.mark.skipif(bool(NETNS_MISSING), reason=str(NETNS_MISSING)),
    skip_unless("jgroups-5-udp"),
]
FIVE = ["jgroups-5-udp", "jgroups-5-tcp", "jgroups-5-nakack4", "jgroups-5-tcp-noxmit"]
# system -> (release, transport, unicast protocol, multicast protocol)
PROTOCOLS = {
    "jgroups-5-udp": (NEWEST, "udp", "UNICAST3", "NAKACK2"),
    "jgroups-5-tcp": (NEWEST, "tcp", "UNICAST3", "NAKACK2"),
    "jgroups-5-nakack4": (NEWEST, "udp", "UNICAST4", "NAKACK4"),
    "jgroups-5-tcp-noxmit": (NOXMIT, "tcp", "UNICAST3", "NAKACK2"),
}


@pytest.fixture
def jclusters(tmp_path: Path) -> Iterator[JGroupsClusters]:
    made = JGroupsClusters(tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("name", FIVE)
def test_conform_passes_on_every_5x_system(tmp_path: Path, name: str) -> None:
    items = Checklist(SYSTEMS[name], "netns", tmp_path / "conform").run()
    assert {i.key: i.ok for i in items} == dict.fromkeys(ITEMS, True), "\n".join(
        f"{i.key}: {i.ok} {i.reason}" for i in items
    )
    assert "no suspicion" in next(i for i in items if i.key == "leave").reason


@pytest.mark.parametrize("name", FIVE)
def test_each_stack_logs_its_own_protocols_seqnos(jclusters: JGroupsClusters, name: str) -> None:
    release, transport, unicast, multicast = PROTOCOLS[name]
    c = jclusters.start(name, ["A", "B"], "netns")
    assert c.spec.transport == transport
    c.control("A", "send", to="B", count=10, size=200)
    c.control("B", "multicast", count=10, size=200)
    wait_tasks(c, "A")
    wait_tasks(c, "B")
    wait_for(lambda: len(events(c, "B", "deliver", sender="A", kind="unicast")) == 10, 20, "B to get A's unicasts")
    wait_for(lambda: len(events(c, "A", "deliver", sender="B", kind="multicast")) == 10, 20, "A to get B's multicasts")
    start = history(c, "A")[0]
    assert (start["release"], start["transport"]) == (release, transport)
    assert start["stack"] == f"jgroups-{release}/{SYSTEMS[name].stack}"
    sent = {e["msg_id"]: (e["conn_id"], e["seqno"]) for e in events(c, "A", "send", kind="unicast")}
    assert {e["msg_id"]: (e["conn_id"], e["seqno"]) for e in events(c, "B", "deliver", sender="A")} == sent
    msent = {e["msg_id"]: e["seqno"] for e in events(c, "B", "send", kind="multicast")}
    assert {e["msg_id"]: e["seqno"] for e in events(c, "A", "deliver", sender="B", kind="multicast")} == msent
    counters = c.control("A", "stats")["counters"]
    assert (counters["member"]["unicast_protocol"], counters["member"]["multicast_protocol"]) == (unicast, multicast)
    assert counters["member"]["release"] == release
    assert counters["wire"][unicast]["sent"]["DATA"] >= 10 and counters["wire"][multicast]["received"]["MSG"] >= 10
    assert counters[unicast]["num_msgs_sent"] >= 10  # the jar's own managed attribute


def test_a_split_writes_suspects_and_its_heal_a_merge_view(jclusters: JGroupsClusters) -> None:
    """C is cut off from A and B: both sides install views of their own after suspecting the others; after the heal
    MERGE3 merges them into a MergeView naming the two subgroups it merged, which every member logs."""
    c = jclusters.start("jgroups-5-udp", ["A", "B", "C"], "netns")
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


@pytest.mark.parametrize("name", [pytest.param("jgroups-2.12", marks=skip_unless("jgroups-2.12")), "jgroups-5-udp"])
def test_the_leave_fault_is_a_graceful_leave(jclusters: JGroupsClusters, name: str) -> None:
    """The coordinator leaves by the Cluster API's leave (the `leave` fault): on both member programs it is the
    control command `leave` (ch.disconnect()), so B and C install a view without A from A's own VIEW, never
    suspecting it; SIGTERM (what the fault sent before) halts the JVM, which the group sees as a crash."""
    c = jclusters.start(name, ["A", "B", "C"], "netns")
    c.leave("A")
    view = wait_view(c, ["B", "C"], timeout=20)
    assert sorted(view["members"]) == ["B", "C"]
    wait_for(lambda: [e["event"] for e in history(c, "A")][-2:] == ["left", "stop"], 15, "A's `left` and `stop`")
    for other in ("B", "C"):
        assert not events(c, other, "suspect", peer="A"), history(c, other)


@pytest.mark.parametrize(
    "name",
    [
        "jgroups-5-udp",
        pytest.param("jgroups-3-unicast3", marks=skip_unless("jgroups-3-unicast3")),
        pytest.param("jgroups-2.12", marks=skip_unless("jgroups-2.12")),
    ],
)
def test_a_member_names_a_peer_it_has_never_heard(jclusters: JGroupsClusters, name: str) -> None:
    """C restarts while nothing of D's reaches it (a one-way cut D -> C): C/2's discovery hears no answer from D, so
    JGroups has no logical name for D when C/2 installs its first view, which A sends with D in it. The member's
    UUID carries its chaosbed address (member/Names.java), so C/2's history names D. Found by explore on
    membership-split-merge (docs/explore.md): A, restarted while D was paused, listed D by its UUID in its last
    view, and views_converge failed 10 of 10."""
    c = jclusters.start(name, ["A", "B", "C", "D"], "netns")
    wait_view(c, ["A", "B", "C", "D"], timeout=30)
    c.chaos.add("partition", {"from": ["D"], "to": ["C"], "one_way": True})
    c.kill("C")
    c.restart("C")

    def first_view() -> dict[str, object] | None:
        return next((e for e in history(c, "C") if e["event"] == "view" and e["incarnation"] == 2), None)

    view = wait_for(first_view, 20, "C/2's first view")
    assert set(view["members"]) == {"A", "B", "C", "D"}, view  # C/1 may still be in it, not yet suspected


def _stock(tmp_path: Path, name: str) -> Path:
    """A stock stack file of the 5.5.6 jar, as a user would copy it (never committed)."""
    with zipfile.ZipFile(jar_path(Release.parse(NEWEST))) as z:
        for n in (name, "udp-default.xml"):
            (tmp_path / n).write_bytes(z.read(n))
    return tmp_path / name


def test_a_users_own_xml_file_is_the_stack(jclusters: JGroupsClusters, tmp_path: Path) -> None:
    """The jar's own udp.xml, unchanged (its bind_addr is "match-interface:eth2,...", its group 239.8.8.8): the
    member binds it to chaosbed's address and group through jgroups.bind_addr and the other system properties."""
    stack = _stock(tmp_path, "udp.xml")
    c = jclusters.start(with_stack(SYSTEMS["jgroups-5"], str(stack)), ["A", "B"], "netns")
    assert history(c, "A")[0]["stack"] == f"jgroups-{NEWEST}/{stack}"
    c.control("A", "send", to="B", count=5, size=100)
    wait_for(lambda: len(events(c, "B", "deliver", sender="A", kind="unicast")) == 5, 20, "B to get A's unicasts")
    assert c.control("A", "stats")["counters"]["member"]["unicast_protocol"] == "UNICAST3"


def test_a_stack_file_that_cannot_start_is_exit_2_naming_it(jclusters: JGroupsClusters, tmp_path: Path) -> None:
    bad = tmp_path / "prod.xml"
    bad.write_text(_stock(tmp_path, "udp.xml").read_text().replace("<FD_SOCK2/>", "<FD_SOCKET_NO_SUCH/>"))
    c = jclusters.make(with_stack(SYSTEMS["jgroups-5"], str(bad)), ["A", "B"], "netns")
    with pytest.raises(ClusterError) as e:
        c.start(timeout=30)
    message = str(e.value)
    assert "member A (system 'jgroups-5') exited with 2 at start" in message, message
    assert f"stack file {bad}" in message and "FD_SOCKET_NO_SUCH" in message, message


@pytest.mark.parametrize("kind", ["unicast", "multicast"])
def test_the_send_line_is_written_before_the_message_goes_below_the_reliable_protocol(
    jclusters: JGroupsClusters, tmp_path: Path, kind: str
) -> None:
    """A member killed after its message went down, but before `ch.send` returned, used to leave a message that the
    others delivered and that no send line accounted for (a phantom to the checker). The tap below UNICAST3/NAKACK2
    now writes the line. Shown with the jar's RATE_LIMITER placed below them: 120K bytes per 15 s. A's third 50K
    message starts a new period and its fifth parks inside `ch.send`, below the tap, for the rest of the period. A's
    history already has its fifth send line while B has not delivered the fifth, and B gets it once the period ends,
    seconds after the line. Before the fix, the fifth line appeared only when `ch.send` returned, 15 s later, and B
    delivered it milliseconds after the line. (How many of the first four B has when A's fifth line appears depends
    on the load: a lost datagram's retransmission waits behind the parked fifth.)"""
    stack = _stock(tmp_path, "udp.xml")
    stack.write_text(
        stack.read_text().replace("<RED/>", '<RED/>\n    <RATE_LIMITER max_bytes="120K" time_period="15s"/>')
    )
    c = jclusters.start(with_stack(SYSTEMS["jgroups-5"], str(stack)), ["A", "B"], "netns")
    if kind == "unicast":
        assert c.control("A", "send", to="B", count=5, size=50_000)["ok"]
    else:
        assert c.control("A", "multicast", count=5, size=50_000)["ok"]
    wait_for(lambda: len(events(c, "A", "send", kind=kind)) == 5, 10, "A's five send lines")
    delivered = events(c, "B", "deliver", sender="A", kind=kind)
    assert len(delivered) < 5, delivered  # the fifth is parked below the tap
    wait_for(lambda: len(events(c, "B", "deliver", sender="A", kind=kind)) == 5, 30, "B to get the fifth")
    fifth_sent = events(c, "A", "send", kind=kind)[4]
    fifth_delivered = next(
        e for e in events(c, "B", "deliver", sender="A", kind=kind) if e["msg_id"] == fifth_sent["msg_id"]
    )
    parked_s = (fifth_delivered["t"] - fifth_sent["t"]) / 1e9
    assert parked_s > 5, f"the fifth send line came only {parked_s:.3f} s before B delivered it"


def test_a_lost_first_message_makes_the_receiver_ask_for_it_and_the_taps_log_both(jclusters: JGroupsClusters) -> None:
    """C's first unicast to B (a new connection: first=true) is dropped (the jgroups-5 wire profile's discard): B
    gets C's second without a window, sends SEND_FIRST_SEQNO (its tap writes `sync`), C resends seqno 1 (its tap
    writes `xmit`), and B delivers all five in order. The taps' counts agree with the lines."""
    c = jclusters.start("jgroups-5-udp", ["A", "B", "C"], "netns")
    c.chaos.add("discard", {"match": "UNICAST3.DATA(first=1)", "from": ["C"], "to": ["B"], "count": 1})
    c.control("C", "send", to="B", count=5, size=100, rate=10)
    wait_for(lambda: len(events(c, "B", "deliver", sender="C", kind="unicast")) == 5, 20, "B to get C's five")
    syncs, xmits = events(c, "B", "sync"), events(c, "C", "xmit", peer="B")
    assert [e["peer"] for e in syncs] == ["C"], syncs
    assert [(e["seqno"], e["conn_id"]) for e in xmits] == [(1, xmits[0]["conn_id"])], xmits
    delivered = [e["seqno"] for e in events(c, "B", "deliver", sender="C", kind="unicast")]
    assert delivered == sorted(delivered) == list(range(1, 6))
    b, cw = (c.control(n, "stats")["counters"]["wire"]["UNICAST3"] for n in ("B", "C"))
    assert b["sent"]["SEND_FIRST_SEQNO"] == 1 == cw["received"]["SEND_FIRST_SEQNO"]
