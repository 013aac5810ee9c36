"""Discards in JGroups' names on real JGroups 5.5.6 members (the project's member, systems jgroups-5-udp and
jgroups-5-nakack4 started through the Cluster API on the netns backend): for every name issue #35 lists, the rule
drops exactly what it names and nothing else. Each test captures what reaches the receiving member's interface (before
the kernel's rules) and decodes it with the profile; then
- the rule's own count agrees: the handler's `matched` is every message of the capture that matches (the original
  and its retransmissions), `dropped` is the rule's count (the kernel's DROP counter for a rule it decides alone);
- nothing else is lost: between two quiet instants, the receiver's taps below UNICAST3/NAKACK2 (NAKACK4/UNICAST4)
  counted every message of the capture by header type, but the dropped ones;
- the members show the drop and its repair: the histories deliver every message once and in order, and the jar's
  own counters (retransmissions, XMIT_REQs, acks, views) moved as the drop makes them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.faults import FaultRecord
from orchestration.backends.netns import NetnsCluster
from orchestration.systems import SYSTEMS
from orchestration.systems.clusters import new_cluster, spec_of
from orchestration.systems.jgroups5 import missing, with_stack
from tests.clusters import netns_skip_reason
from tests.foreign.jgroups5_watch import (
    TAPPED,
    Frame,
    Snapshot,
    Watch,
    delivered,
    dropped_messages,
    events,
    expected_tap,
    handled,
    hits,
    jar_delta,
    last_seqno,
    messages,
    tap_delta,
    wait,
)

MISSING = netns_skip_reason() or missing(SYSTEMS["jgroups-5-udp"])
pytestmark = [
    pytest.mark.netns,
    pytest.mark.jgroups,
    pytest.mark.slow,
    pytest.mark.skipif(MISSING is not None, reason=str(MISSING)),
]


class Lab:
    """The clusters and captures of one test, all taken down at its end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.clusters: list[NetnsCluster] = []
        self.watches: list[Watch] = []

    def cluster(self, names: tuple[str, ...] = ("A", "B"), system: str = "jgroups-5-udp", stack: str | None = None):
        s = SYSTEMS[system] if stack is None else with_stack(SYSTEMS[system], stack)
        c = new_cluster(spec_of(s, list(names), "netns"), workdir=self.tmp_path / f"run{len(self.clusters)}")
        assert isinstance(c, NetnsCluster)
        self.clusters.append(c)
        c.start(timeout=60)
        c.wait_for_view(timeout=60)
        return c

    def watch(self, c: NetnsCluster, receiver: str, stack: str = "udp") -> Watch:
        w = Watch(c, receiver, stack)
        self.watches.append(w)
        return w

    def close(self) -> None:
        for w in self.watches:
            w.stop()
        for c in self.clusters:
            c.down()


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    made = Lab(tmp_path)
    try:
        yield made
    finally:
        made.close()


def discard(c: NetnsCluster, expr: str, src: str, dst: str, count: int | None = None) -> FaultRecord:
    args: dict[str, Any] = {"match": expr, "from": src, "to": dst}
    if count is not None:
        args["count"] = count
    return c.chaos.add("discard", args)


Rule = tuple[str, str, int, dict[str, int]]  # (match, source, count, the handler's counters)


def check(w: Watch, s1: Snapshot, s2: Snapshot, rule: Rule, loopback: tuple[str, ...] = ()) -> list[Frame]:
    """The rule's counters against the capture, and the receiver's taps against the capture minus what it dropped
    (plus, for the `loopback` types of the multicast protocol, what the receiver sent itself: TP hands its own
    multicasts, and a NAKACK4 member its acks of its own, back up its stack, never through its interface); returns
    the window's frames."""
    expr, src, count, counts = rule
    frames = w.frames(s1.index, s2.index)
    found = hits(frames, expr, src)
    assert counts["dropped"] == count, (expr, counts)
    assert counts["matched"] == sum(found) >= count, f"{expr}: matched {counts['matched']}, on the wire {sum(found)}"
    gone = dropped_messages(frames, expr, src, count)
    for protocol in TAPPED[w.stack]:
        got = tap_delta(s1, s2, w.receiver, protocol)
        want = expected_tap(frames, protocol, gone)
        if protocol.startswith("NAKACK"):
            sent = tap_delta(s1, s2, w.receiver, protocol, "sent")
            want.update({t: sent[t] for t in loopback if sent[t]})
        assert got == want, (
            f"{expr}: {w.receiver}'s {protocol} counted {dict(got)}, the wire less the drops {dict(want)}"
        )
    return frames


def in_order(c: NetnsCluster, name: str, ids: list[str]) -> Callable[[], bool]:
    return lambda: [m for m in delivered(c, name) if m in ids] == ids


# --- UNICAST3 ---------------------------------------------------------------------------------------------------------


def test_unicast3_data_seqno_drops_that_message_once_and_its_retransmission_repairs_it(lab: Lab) -> None:
    c = lab.cluster()
    c.control("A", "send", to="B", count=1, size=100)
    wait(in_order(c, "B", ["A>B#1"]), 20, "B to deliver A>B#1")
    expr = f"UNICAST3.DATA(seqno={last_seqno(c, 'A', 'unicast', 'B') + 2})"
    w = lab.watch(c, "B")
    s1 = w.quiet()
    record = discard(c, expr, "A", "B", count=1)
    c.control("A", "send", to="B", count=5, size=100, rate=20)
    ids = [f"A>B#{i}" for i in range(1, 7)]
    wait(in_order(c, "B", ids), 30, "B to deliver A>B#1..#6")
    s2 = w.quiet()
    frames = check(w, s1, s2, (expr, "A", 1, handled(c, record, "A", "B")))
    assert sum(hits(frames, expr, "A")) >= 2, "the dropped message came again"
    assert delivered(c, "B") == ids, "B delivered other than A sent, or twice"
    # The dropped message is A>B#3, followed by three more: B sees the gap and asks (XMIT_REQ), A answers from its
    # send window (UNICAST3.handleXmitRequest counts that in xmit_rsps_sent). num_xmits counts only A's resends of its
    # highest unacked message (triggerXmit), which come or not as B's acks race A's xmit task: 0 once in CI.
    assert jar_delta(s1, s2, "B", "UNICAST3", "xmit_reqs_sent") >= 1, "B asked for the dropped message"
    assert jar_delta(s1, s2, "A", "UNICAST3", "xmit_rsps_sent") >= 1, "A resent it from its send window"


def test_unicast3_data_seqno_decided_by_the_kernel_drops_every_copy_until_healed(lab: Lab) -> None:
    """A stateless rule: u32 drops each copy in the kernel (its DROP counter is the capture's count of that message,
    the handler judges none of A's datagrams); after the heal the next retransmission gets through."""
    c = lab.cluster()
    c.control("A", "send", to="B", count=1, size=100)
    wait(in_order(c, "B", ["A>B#1"]), 20, "B to deliver A>B#1")
    expr = f"UNICAST3.DATA(seqno={last_seqno(c, 'A', 'unicast', 'B') + 1})"
    w = lab.watch(c, "B")
    s1 = w.quiet()
    record = discard(c, expr, "A", "B")
    c.control("A", "send", to="B", count=1, size=100)
    wait(lambda: c.chaos.kernel_counters()["B"]["dropped"] >= 3, 20, "the kernel to drop three copies")
    before = w.cap.caught_up()  # frames before it: surely judged before the read; before `after`: perhaps
    dropped = c.chaos.kernel_counters()["B"]["dropped"]
    rule = handled(c, record, "A", "B")
    after = w.cap.caught_up()
    c.chaos.heal()
    wait(in_order(c, "B", ["A>B#1", "A>B#2"]), 30, "B to deliver A>B#2 after the heal")
    seen = [sum(hits(w.frames(s1.index, end), expr, "A")) for end in (before, after)]
    assert seen[0] <= dropped <= seen[1] and dropped >= 3, (dropped, seen)
    assert rule["matched"] == 0, f"the kernel decides A's single-message datagrams, the handler saw {rule}"


def test_unicast3_data_first_drops_a_connections_first_message_and_send_first_seqno_repairs_it(lab: Lab) -> None:
    c = lab.cluster(("A", "B", "C"))  # B and C have not talked yet: B's first unicast to C opens a connection
    expr = "UNICAST3.DATA(first=1)"
    w = lab.watch(c, "C")
    s1 = w.quiet()
    record = discard(c, expr, "B", "C", count=1)
    c.control("B", "send", to="C", count=3, size=100, rate=20)
    ids = ["B>C#1", "B>C#2", "B>C#3"]
    wait(in_order(c, "C", ids), 30, "C to deliver B>C#1..#3")
    s2 = w.quiet()
    frames = check(w, s1, s2, (expr, "B", 1, handled(c, record, "B", "C")))
    assert messages(frames, "UNICAST3.DATA", "B") >= 4  # the three and the first again
    assert delivered(c, "C") == ids
    assert tap_delta(s1, s2, "C", "UNICAST3", "sent")["SEND_FIRST_SEQNO"] >= 1, "C asked B for its first message"


def test_unicast3_ack_drops_acks_and_the_sender_resends_until_one_gets_through(lab: Lab) -> None:
    c = lab.cluster()
    expr = "UNICAST3.ACK()"
    w = lab.watch(c, "A")
    s1 = w.quiet()
    record = discard(c, expr, "B", "A", count=3)
    c.control("A", "send", to="B", count=5, size=100, rate=10)
    c.control("B", "send", to="A", count=3, size=100, rate=5)  # B's DATA to A: UNICAST3 the rule must not touch
    ids = [f"A>B#{i}" for i in range(1, 6)]
    wait(in_order(c, "B", ids), 30, "B to deliver A>B#1..#5")
    wait(in_order(c, "A", ["B>A#1", "B>A#2", "B>A#3"]), 30, "A to deliver B>A#1..#3")
    wait(lambda: c.control("A", "stats")["counters"]["UNICAST3"]["num_unacked_messages"] == 0, 30, "A acked")
    s2 = w.quiet()
    frames = check(w, s1, s2, (expr, "B", 3, handled(c, record, "B", "A")))
    acks = messages(frames, "UNICAST3.ACK", "B")
    assert jar_delta(s1, s2, "A", "UNICAST3", "num_acks_received") == acks - 3
    assert jar_delta(s1, s2, "B", "UNICAST3", "num_acks_sent") == acks, "an ACK B sent did not reach A's interface"
    assert delivered(c, "B") == ids


def test_unicast3_send_first_seqno_is_dropped_and_asked_again(lab: Lab) -> None:
    c = lab.cluster(("A", "B", "C"))
    w = lab.watch(c, "B")
    s1 = w.quiet()
    discard(c, "UNICAST3.DATA(first=1)", "B", "C", count=1)  # C will not have B's first message: it asks
    expr = "UNICAST3.SEND_FIRST_SEQNO()"
    record = discard(c, expr, "C", "B", count=1)
    c.control("B", "send", to="C", count=3, size=100, rate=20)
    ids = ["B>C#1", "B>C#2", "B>C#3"]
    wait(in_order(c, "C", ids), 40, "C to deliver B>C#1..#3")
    s2 = w.quiet()
    frames = check(w, s1, s2, (expr, "C", 1, handled(c, record, "C", "B")))
    asked = messages(frames, expr.removesuffix("()"), "C")
    assert asked >= 2 and tap_delta(s1, s2, "C", "UNICAST3", "sent")["SEND_FIRST_SEQNO"] == asked
    assert delivered(c, "C") == ids


def test_unicast3_xmit_req_is_dropped_and_the_receiver_asks_again(lab: Lab) -> None:
    c = lab.cluster()
    c.control("A", "send", to="B", count=1, size=100)
    wait(in_order(c, "B", ["A>B#1"]), 20, "B to deliver A>B#1")
    gap = f"UNICAST3.DATA(seqno={last_seqno(c, 'A', 'unicast', 'B') + 1})"
    w = lab.watch(c, "A")
    s1 = w.quiet()
    discard(c, gap, "A", "B", count=1)  # B misses one: it asks for it
    expr = "UNICAST3.XMIT_REQ()"
    record = discard(c, expr, "B", "A", count=1)
    c.control("A", "send", to="B", count=3, size=100, rate=10)
    ids = [f"A>B#{i}" for i in range(1, 5)]
    wait(in_order(c, "B", ids), 40, "B to deliver A>B#1..#4")
    s2 = w.quiet()
    frames = check(w, s1, s2, (expr, "B", 1, handled(c, record, "B", "A")))
    asked = messages(frames, "UNICAST3.XMIT_REQ", "B")
    assert asked >= 1 and jar_delta(s1, s2, "A", "UNICAST3", "xmit_reqs_received") == asked - 1
    assert jar_delta(s1, s2, "B", "UNICAST3", "xmit_reqs_sent") == asked
    assert delivered(c, "B") == ids


CLOSING = """<UNICAST3 xmit_interval="500" conn_expiry_timeout="1000" conn_close_timeout="1000"/>"""


def test_unicast3_close_is_dropped_and_the_next_connection_still_opens(lab: Lab, tmp_path: Path) -> None:
    """A stack whose idle connections close after a second: A's CLOSE to B is dropped (B keeps a stale receive
    window); A's next unicast opens a new connection (first, a new conn_id) and B delivers it."""
    from foreign.jgroups import HERE

    stack = tmp_path / "closing.xml"
    text = (HERE / "stacks5" / "udp-fast.xml").read_text()
    assert text.count('<UNICAST3 xmit_interval="500"/>') == 1, "udp-fast.xml's UNICAST3 is not as this test expects"
    stack.write_text(text.replace('<UNICAST3 xmit_interval="500"/>', CLOSING))
    c = lab.cluster(system="jgroups-5", stack=str(stack))
    w = lab.watch(c, "B")
    s1 = w.quiet()
    expr = "UNICAST3.CLOSE()"
    record = discard(c, expr, "A", "B", count=1)
    c.control("A", "send", to="B", count=1, size=100)
    wait(lambda: handled(c, record, "A", "B")["dropped"] == 1, 30, "A's CLOSE to B, dropped")
    c.control("A", "send", to="B", count=1, size=100)
    wait(in_order(c, "B", ["A>B#1", "A>B#2"]), 30, "B to deliver A>B#2 on A's new connection")
    s2 = w.quiet()
    frames = check(w, s1, s2, (expr, "A", 1, handled(c, record, "A", "B")))
    conn = {e["msg_id"]: e["conn_id"] for e in events(c, "B") if e["event"] == "deliver"}
    assert conn["A>B#2"] != conn["A>B#1"], "A's second unicast did not travel on a new connection"
    firsts = [h for f in frames if f.src == "A" for m in f.dgram.messages for h in m.headers
              if h.key == "UNICAST3.DATA" and h.fields["first"] and h.fields["conn_id"] == conn["A>B#2"]]  # fmt: skip
    assert firsts, "the new connection's first message is not on the wire"
    assert delivered(c, "B") == ["A>B#1", "A>B#2"]


# --- NAKACK2, NAKACK4 -------------------------------------------------------------------------------------------------


def test_nakack2_msg_seqno_is_cut_out_of_a_bundle_alone_and_repaired(lab: Lab) -> None:
    """A burst of multicasts goes out in LIST datagrams: the handler cuts the one message out of its list (the
    others of that datagram are delivered, counted by B's tap as they arrived), B asks for it, A resends it.
    Whether the jar bundles the targeted message is its bundler's choice (on a loaded machine its sender thread can
    drain each message alone): a burst whose target went out alone is repaired all the same (checked), and the next
    burst targets another seqno, BURSTS at most."""
    c = lab.cluster()
    c.control("A", "multicast", count=1, size=100)
    wait(in_order(c, "B", ["A>*#1"]), 20, "B to deliver A>*#1")
    w = lab.watch(c, "B")
    forms = []
    for burst in range(BURSTS):
        expr = f"NAKACK2.MSG(seqno={last_seqno(c, 'A', 'multicast') + 5})"
        s1 = w.quiet()
        record = discard(c, expr, "A", "B", count=1)
        c.control("A", "multicast", count=10, size=100)  # no rate: one burst, bundled
        ids = [f"A>*#{i}" for i in range(1, 12 + 10 * burst)]
        wait(in_order(c, "B", ids), 30, f"B to deliver A>*#1..#{len(ids)}")
        s2 = w.quiet()
        frames = check(w, s1, s2, (expr, "A", 1, handled(c, record, "A", "B")))
        assert jar_delta(s1, s2, "B", "NAKACK2", "xmit_reqs_sent") >= 1
        assert jar_delta(s1, s2, "A", "NAKACK2", "xmit_reqs_received") >= 1
        assert delivered(c, "B") == ids
        first = next(f for f in frames if f.src == "A" and any(hits([f], expr, "A")))
        forms.append((first.dgram.form, len(first.dgram.messages)))
        if first.dgram.form == "LIST" and len(first.dgram.messages) > 1:
            break
    else:
        pytest.fail(f"the jar sent the targeted message alone in every burst: {forms}")
    assert c.chaos.handler_stats()["B"]["rewritten"] >= 1


BURSTS = 4  # bursts of 10 multicasts until the targeted one travels in a LIST datagram


def test_nakack2_xmit_req_is_dropped_and_asked_again(lab: Lab) -> None:
    c = lab.cluster()
    c.control("A", "multicast", count=1, size=100)
    wait(in_order(c, "B", ["A>*#1"]), 20, "B to deliver A>*#1")
    gap = f"NAKACK2.MSG(seqno={last_seqno(c, 'A', 'multicast') + 1})"
    w = lab.watch(c, "A")
    s1 = w.quiet()
    discard(c, gap, "A", "B", count=1)
    expr = "NAKACK2.XMIT_REQ()"
    record = discard(c, expr, "B", "A", count=1)
    c.control("A", "multicast", count=3, size=100, rate=10)
    c.control("B", "multicast", count=2, size=100, rate=5)  # B's NAKACK2.MSGs to A: the rule must not touch them
    ids = [f"A>*#{i}" for i in range(1, 5)]
    wait(in_order(c, "B", ids), 40, "B to deliver A>*#1..#4")
    wait(in_order(c, "A", ["B>*#1", "B>*#2"]), 30, "A to deliver B>*#1..#2")
    s2 = w.quiet()
    frames = check(w, s1, s2, (expr, "B", 1, handled(c, record, "B", "A")), loopback=("MSG",))
    asked = messages(frames, "NAKACK2.XMIT_REQ", "B")
    assert asked >= 2 and jar_delta(s1, s2, "A", "NAKACK2", "xmit_reqs_received") == asked - 1
    assert jar_delta(s1, s2, "B", "NAKACK2", "xmit_reqs_sent") == asked
    assert [m for m in delivered(c, "B") if m.startswith("A>")] == ids
    assert [m for m in delivered(c, "B") if m.startswith("B>")] == ["B>*#1", "B>*#2"]


def test_nakack2_highest_seqno_decided_by_the_kernel_and_the_handler_drops_every_one(lab: Lab) -> None:
    """A stateless rule: the kernel drops the single-message datagrams (its DROP counter), the handler cuts those in
    lists; together they are every HIGHEST_SEQNO of A's that reached B, and none of A's multicasts is lost."""
    c = lab.cluster()
    expr = "NAKACK2.HIGHEST_SEQNO()"
    w = lab.watch(c, "B")
    s1 = w.quiet()
    record = discard(c, expr, "A", "B")
    for burst in range(3):
        c.control("A", "multicast", count=3, size=100, rate=20)
        ids = [f"A>*#{i}" for i in range(1, 3 * burst + 4)]
        wait(in_order(c, "B", ids), 30, f"B to deliver A's burst {burst + 1}")
        w.quiet()  # A resends its highest seqno once it is idle
    s2 = w.quiet()
    frames = w.frames(s1.index, s2.index)
    kernel, rule = c.chaos.kernel_counters()["B"]["dropped"], handled(c, record, "A", "B")
    on_wire = messages(frames, expr.removesuffix("()"), "A")
    assert on_wire >= 3 and kernel >= 1 and kernel + rule["dropped"] == on_wire, (kernel, rule, on_wire)
    assert rule["matched"] == rule["dropped"], "the handler saw a HIGHEST_SEQNO it did not drop"
    got = tap_delta(s1, s2, "B", "NAKACK2")
    assert got["HIGHEST_SEQNO"] == 0 and got["MSG"] == messages(frames, "NAKACK2.MSG", "A") == 9, dict(got)
    assert delivered(c, "B") == [f"A>*#{i}" for i in range(1, 10)]


def test_nakack4_ack_drops_acks_and_the_window_still_moves(lab: Lab) -> None:
    c = lab.cluster(system="jgroups-5-nakack4")
    expr = "NAKACK4.ACK()"
    w = lab.watch(c, "A", "nakack4")
    s1 = w.quiet()
    record = discard(c, expr, "B", "A", count=3)
    c.control("A", "multicast", count=10, size=100, rate=20)
    c.control("B", "send", to="A", count=3, size=100, rate=5)  # B's UNICAST4 to A and its ACKs: not this rule's
    ids = [f"A>*#{i}" for i in range(1, 11)]
    wait(in_order(c, "B", ids), 30, "B to deliver A>*#1..#10")
    wait(in_order(c, "A", ["B>A#1", "B>A#2", "B>A#3"]), 30, "A to deliver B>A#1..#3")
    wait(lambda: c.control("A", "stats")["counters"]["NAKACK4"]["num_unacked_messages"] == 0, 30, "A's window acked")
    s2 = w.quiet()
    # A is the only one multicasting: its own multicasts, HIGHEST_SEQNOs and the acks of its own come back to it
    frames = check(w, s1, s2, (expr, "B", 3, handled(c, record, "B", "A")), ("MSG", "HIGHEST_SEQNO", "ACK"))
    acks = messages(frames, "NAKACK4.ACK", "B")
    own_acks = tap_delta(s1, s2, "A", "NAKACK4", "sent")["ACK"]
    assert acks > 3 and jar_delta(s1, s2, "A", "NAKACK4", "acks_received") == acks - 3 + own_acks
    assert delivered(c, "B") == ids


# --- GMS, MERGE3, STABLE ----------------------------------------------------------------------------------------------


def test_gms_view_is_dropped_once_and_nakack2_brings_it_again(lab: Lab) -> None:
    """C leaves: A's VIEW to B is dropped once; it travels as a NAKACK2 message, so B asks for it and installs it
    (GMS counts one view more); A's multicasts after it are not touched."""
    c = lab.cluster(("A", "B", "C"))
    expr = "GMS.VIEW()"
    w = lab.watch(c, "B")
    s1 = w.quiet()
    views = c.control("B", "stats")["counters"]["GMS"]["num_views"]
    record = discard(c, expr, "A", "B", count=1)
    c.leave("C")
    c.wait_for_view(["A", "B"], timeout=30)
    c.control("A", "multicast", count=3, size=100, rate=20)
    wait(in_order(c, "B", ["A>*#1", "A>*#2", "A>*#3"]), 30, "B to deliver A>*#1..#3")
    s2 = w.quiet()
    frames = check(w, s1, s2, (expr, "A", 1, handled(c, record, "A", "B")))
    assert messages(frames, "GMS.VIEW", "A") >= 2, "the VIEW was not sent again"
    assert s2.counters["B"]["GMS"]["num_views"] == views + 1
    assert jar_delta(s1, s2, "B", "NAKACK2", "xmit_reqs_sent") >= 1


def test_gms_join_rsp_is_dropped_once_and_the_joiner_still_joins(lab: Lab) -> None:
    """C leaves and joins again as C/2: A's JOIN_RSP is dropped once; it is UNICAST3 data, so A resends it until C/2
    acks, and C/2 joins. C/2 has no counters of before, so its taps are not compared; the capture and the rule are."""
    c = lab.cluster(("A", "B", "C"))
    c.leave("C")
    c.wait_for_view(["A", "B"], timeout=30)
    expr = "GMS.JOIN_RSP()"
    w = lab.watch(c, "C")
    start = len(w.frames())
    record = discard(c, expr, "A", "C", count=1)
    c.restart("C", timeout=60)
    view = c.wait_for_view(timeout=60)
    assert "C/2" in view.get("addresses", []), view  # type: ignore[operator]

    # A resends its highest unacked message to C/2 every xmit_interval (500 ms) until C/2 acks: no JOIN_RSP reaching C
    # for 2 s says the resends ended. (A's num_unacked_messages would also count what A sent C/1 and C/1 never acked,
    # kept for conn_close_timeout, 240 s.)
    def resends_ended() -> bool:
        sent = [f.t for f in w.frames(start) if f.src == "A" and messages([f], "GMS.JOIN_RSP")]
        return bool(sent) and time.monotonic_ns() - sent[-1] > 2_000_000_000

    try:
        wait(resends_ended, 30, "A's JOIN_RSPs to end")
    except AssertionError as e:
        unicast3 = c.control("A", "stats")["counters"]["UNICAST3"]
        raise AssertionError(
            f"{e}; {messages(w.frames(start), 'GMS.JOIN_RSP', 'A')} seen; A's UNICAST3 {unicast3}"
        ) from e
    counts = handled(c, record, "A", "C")
    frames = w.frames(start)
    rsps = messages(frames, "GMS.JOIN_RSP", "A")
    assert counts["dropped"] == 1 and counts["matched"] == rsps >= 2, (counts, rsps)
    assert c.control("A", "stats")["counters"]["UNICAST3"]["num_xmits"] >= 1


def installed(
    c: NetnsCluster, w: Watch, expr: str, src: str, dst: str, count: int
) -> tuple[FaultRecord, tuple[int, int]]:
    """A rule on periodic messages, with the capture's indices (Capture.caught_up) before and after it was installed:
    the frames before the first reached the interface before the rule existed, those from the second on after."""
    before = w.cap.caught_up()
    record = discard(c, expr, src, dst, count)
    return record, (before, w.cap.caught_up())


def bounded(
    w: Watch, since: tuple[int, int], expr: str, src: str, read: Callable[[], dict[str, int]]
) -> dict[str, int]:
    """For a rule on periodic messages: its counters, read between two of the capture's indices, against the capture's
    count of the matching messages surely after the rule was installed and surely before the read (at least), and of
    those perhaps after and perhaps before (at most). Indices, not the capture's stamps: on a busy machine its thread
    reads a frame late, so a frame the rule counted may be stamped after the read, or not be read yet."""
    before = w.cap.caught_up()
    counts = read()
    after = w.cap.caught_up()
    inner, outer = w.frames(since[1], before), w.frames(since[0], after)
    seen = (sum(hits(inner, expr, src)), sum(hits(outer, expr, src)))
    assert seen[0] <= counts["matched"] <= seen[1], f"{expr}: matched {counts}, on the wire {seen}"
    return counts


def test_merge3_info_drops_two_and_nothing_else(lab: Lab) -> None:
    c = lab.cluster()
    expr = "MERGE3.INFO()"
    w = lab.watch(c, "B")
    s1 = w.quiet()
    record, since = installed(c, w, expr, "A", "B", 2)
    c.control("A", "multicast", count=3, size=100, rate=2)  # NAKACK2 from A meanwhile: not this rule's
    wait(lambda: handled(c, record, "A", "B")["dropped"] == 2, 30, "two of A's INFOs dropped")
    wait(in_order(c, "B", ["A>*#1", "A>*#2", "A>*#3"]), 30, "B to deliver A>*#1..#3")
    counts = bounded(w, since, expr, "A", lambda: handled(c, record, "A", "B"))
    assert counts["dropped"] == 2 and counts["matched"] >= 2
    s2 = w.quiet()
    frames = w.frames(s1.index, s2.index)
    for protocol in TAPPED["udp"]:
        assert tap_delta(s1, s2, "B", protocol) == expected_tap(frames, protocol, []), protocol
    assert s2.counters["B"]["GMS"]["num_views"] == s1.counters["B"]["GMS"]["num_views"], "no view change"


def test_stable_gossip_drops_two_and_stability_still_comes(lab: Lab) -> None:
    """B's STABLE gossip to the coordinator A: two dropped; B's gossips sent (the jar's count) all reached A's
    interface, A still completes rounds (it multicasts STABILITY) and its reliable traffic is untouched."""
    c = lab.cluster()
    expr = "STABLE.GOSSIP()"
    w = lab.watch(c, "A")
    s1 = w.quiet()
    record, since = installed(c, w, expr, "B", "A", 2)
    c.control("B", "send", to="A", count=3, size=100, rate=2)  # UNICAST3 from B meanwhile: not this rule's
    wait(lambda: handled(c, record, "B", "A")["dropped"] == 2, 40, "two of B's gossips dropped")
    stability = s1.counters["A"]["STABLE"]["num_stability_msgs_sent"]
    wait(lambda: c.control("A", "stats")["counters"]["STABLE"]["num_stability_msgs_sent"] > stability, 40, "STABILITY")
    wait(in_order(c, "A", ["B>A#1", "B>A#2", "B>A#3"]), 30, "A to deliver B>A#1..#3")
    counts = bounded(w, since, expr, "B", lambda: handled(c, record, "B", "A"))
    assert counts["dropped"] == 2 and counts["matched"] >= 2
    s2 = w.quiet()
    for protocol in TAPPED["udp"]:
        assert tap_delta(s1, s2, "A", protocol) == expected_tap(w.frames(s1.index, s2.index), protocol, []), protocol
    sent = jar_delta(s1, s2, "B", "STABLE", "num_stable_msgs_sent")
    margin = 50_000_000  # a gossip sent just before a counter was read reaches A's interface a little later
    inner = [f for f in w.frames() if s1.t + margin < f.t < s2.t - margin]
    outer = [f for f in w.frames() if s1.t - margin < f.t < s2.t + margin]
    assert messages(inner, expr[:-2], "B") <= sent <= messages(outer, expr[:-2], "B") and sent >= 2, sent


# --- what the profile cannot read -------------------------------------------------------------------------------------


def test_a_datagram_of_a_shape_the_profile_does_not_know_passes_untouched_and_fault_list_shows_the_count(
    lab: Lab,
) -> None:
    """A golden UNICAST3 datagram with TpHeader's magic made unknown, sent from A's namespace to a socket in B's while
    a discard of A's messages is in force at B: the handler cannot walk it, passes it (the socket gets the very
    bytes) and counts it; `chaosbed fault list` and the fault table's bypass report say how many."""
    import socket

    from click.testing import CliRunner

    from chaos.profiles import jgroups5 as wire
    from orchestration.backends.netns import in_namespace
    from orchestration.cli.main import main
    from tests.foreign.jgroups5_golden import data_of, golden

    c = lab.cluster()
    record = discard(c, "UNICAST3.ACK(seqno=999999)", "A", "B", count=1)  # no real ACK of A to B matches it
    data = bytearray(data_of(next(d for d in golden() if d["kind"] == "SINGLE [UNICAST3.DATA TP]")))
    tp = wire.decode(bytes(data)).messages[0].headers[-1]
    data[tp.start + 2 : tp.start + 4] = (999).to_bytes(2, "big")
    assert not wire.decode(bytes(data)).skippable
    b_ip = c.members["B"].ip
    with in_namespace(c.member_ns("B")):
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with in_namespace(c.member_ns("A")):
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with rx, tx:
        rx.bind((b_ip, 7899))
        rx.settimeout(10)
        for _ in range(2):
            tx.sendto(bytes(data), (b_ip, 7899))
            assert rx.recv(65536) == bytes(data), "the datagram did not pass untouched"
    bypass = wait(lambda: (b := c.chaos.queue_bypass().get("B")) and b.unknown_shapes == 2 and b, 10, "the count")
    assert handled(c, record, "A", "B")["matched"] == 0 and bypass.bypassed == 0
    listed = CliRunner().invoke(main, ["fault", "list", "--cluster", c.label])
    text = " ".join(listed.output.split())
    assert listed.exit_code == 0 and "could not read 2 datagrams of a shape its wire profile does not know" in text, (
        text
    )
    assert f"judged by no message rule of {record.id}" in text, text
