"""Unit tests for node/protocols/stable.py: Stable alone with a recording digest source, and Stable on top of
Nakack2 with a hand-driven network and a virtual clock."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from node.protocols.base import NEVER, Effects
from node.protocols.nakack2 import MSG, XMIT_REQ, Nakack2, Nakack2Props
from node.protocols.stable import STABLE, Stable, StableProps
from node.wire import Digest, View, ViewId
from tests.unit.harness import Net, Predicate

V1 = View(ViewId("A", 1), ("A", "B", "C"))


class Source:
    """A digest source that records what STABLE hands it."""

    def __init__(self, digest: Digest) -> None:
        self.d = digest
        self.calls: list[Digest] = []

    def digest(self) -> Digest:
        return dict(self.d)

    def stable(self, digest: Digest) -> None:
        self.calls.append(digest)


def lone(digest: Digest | None = None, **props: Any) -> tuple[Stable, Source, Effects]:
    src = Source(digest if digest is not None else {"A": (5, 5), "B": (3, 4), "C": (2, 2), "Z": (9, 9)})
    s = Stable("A", src, StableProps(**props))
    out = Effects()
    s.install_view(V1, 0.0, out)
    return s, src, out


# ---------------------------------------------------------------------------------------------------- Stable alone


def test_round_completes_with_per_sender_minimum_of_highest_delivered() -> None:
    s, src, out = lone()
    s.tick(0.0, out)  # the first tick gossips
    ((dest, msg),) = out.sends
    assert dest is None and msg == STABLE(ViewId("A", 1), {"A": (5, 5), "B": (3, 4), "C": (2, 2)})  # no Z
    s.handle("B", [STABLE(V1.view_id, {"A": (4, 4), "B": (7, 7), "C": (2, 3), "Z": (0, 0)})], 0.1, out)
    assert src.calls == [] and s.counters()["digests_collected"] == 2
    s.handle("C", [STABLE(V1.view_id, {"A": (5, 6), "B": (3, 7), "C": (8, 8)})], 0.2, out)
    assert src.calls == [{"A": (4, 6), "B": (3, 7), "C": (2, 8)}]  # (min delivered, max received)
    assert s.counters()["stable_rounds"] == 1 and s.counters()["digests_collected"] == 0  # a new round


def test_a_members_own_entry_counts_as_all_it_sent_delivered() -> None:
    """A member's own digest entry is (purged, highest sent) (for a merge digest); it delivered all it sent, so the
    round counts it as (highest sent, highest sent): what it purged does not hold back the minimum."""
    s, src, out = lone({"A": (0, 5), "B": (3, 4), "C": (2, 2)})
    s.tick(0.0, out)
    s.handle("B", [STABLE(V1.view_id, {"A": (5, 5), "B": (1, 7), "C": (2, 3)})], 0.1, out)
    s.handle("C", [STABLE(V1.view_id, {"A": (5, 6), "B": (7, 7), "C": (0, 8)})], 0.2, out)
    assert src.calls == [{"A": (5, 6), "B": (3, 7), "C": (2, 8)}]


def test_a_round_during_a_merge_handshake_purges_nothing_of_our_own() -> None:
    """While a merge handshake is under way (holds_own_purges), a completed round hands the source no entry for
    our own multicasts: the merge digest we answered names our purged point, and receivers will ask for what lies
    above it. The first round after the handshake purges them."""
    s, src, out = lone({"A": (0, 5), "B": (3, 4), "C": (2, 2)})
    merging = True
    s.holds_own_purges = lambda: merging
    for _ in range(2):
        s.tick(s.next_wakeup(), out)
        s.handle("B", [STABLE(V1.view_id, {"A": (5, 5), "B": (4, 4), "C": (2, 2)})], 0.1, out)
        s.handle("C", [STABLE(V1.view_id, {"A": (5, 5), "B": (4, 4), "C": (2, 2)})], 0.2, out)
        merging = False
    assert src.calls == [{"B": (3, 4), "C": (2, 2)}, {"A": (5, 5), "B": (3, 4), "C": (2, 2)}]
    assert s.counters()["stable_own_purges_deferred"] == 1


def test_the_stack_defers_own_purges_while_gms_holds_multicasts() -> None:
    """build_stack wires STABLE's holds_own_purges to GMS.holds_multicasts (not joined yet, or a merge we lead or
    answered)."""
    from node.protocols.gms import Gms, State
    from node.stack import build_stack

    stack = build_stack("A", "unicast3+nakack2")
    assert stack.stable is not None and isinstance(stack.gms, Gms)
    assert stack.stable.holds_own_purges() is stack.gms.holds_multicasts is True  # not joined yet
    stack.gms.s.state = State.MEMBER
    assert stack.stable.holds_own_purges() is stack.gms.holds_multicasts is False
    stack.gms.s.lock = (1, "B", 5.0)  # a merge participant's lock: (merge_id, leader, until)
    assert stack.stable.holds_own_purges() is True


def test_lagging_member_holds_back_the_minimum() -> None:
    s, src, out = lone()
    s.tick(0.0, out)
    for rnd in range(3):
        s.handle("B", [STABLE(V1.view_id, {"A": (5, 5), "B": (9, 9), "C": (2, 2)})], 1.0, out)
        assert len(src.calls) == rnd  # C has not reported in this round
        s.handle("C", [STABLE(V1.view_id, {"A": (1, 5), "B": (1, 9), "C": (2, 2)})], 1.0, out)
        assert src.calls[-1] == {"A": (1, 5), "B": (1, 9), "C": (2, 2)}
        s.tick(20.0 * (rnd + 1), out)


def test_stables_of_another_view_id_or_from_non_members_are_ignored() -> None:
    s, src, out = lone()
    s.tick(0.0, out)
    s.handle("B", [STABLE(ViewId("A", 2), {"A": (0, 0)}), STABLE(ViewId("X", 1), {"A": (0, 0)})], 0.1, out)
    s.handle("X", [STABLE(V1.view_id, {"A": (0, 0)})], 0.1, out)
    s.handle("B", [MSG(1, b"not a stable")], 0.1, out)
    c = s.counters()
    assert (c["stable_received"], c["stable_other_view_id"], c["stable_from_non_members"]) == (3, 2, 1)
    assert c["digests_collected"] == 1 and src.calls == []


def test_view_change_starts_a_new_round() -> None:
    s, src, out = lone()
    s.tick(0.0, out)
    s.handle("B", [STABLE(V1.view_id, {"A": (5, 5), "B": (9, 9), "C": (2, 2)})], 0.1, out)
    v2 = View(ViewId("A", 2), ("A", "B", "C"))
    s.install_view(v2, 0.2, out)
    assert s.counters()["digests_collected"] == 0
    s.handle("C", [STABLE(V1.view_id, {"A": (5, 5), "B": (9, 9), "C": (2, 2)})], 0.3, out)  # late, old view
    assert s.counters()["stable_other_view_id"] == 1 and src.calls == []
    s.tick(20.0, out)
    s.handle("B", [STABLE(v2.view_id, {"A": (5, 5), "B": (9, 9), "C": (2, 2)})], 20.1, out)
    s.handle("C", [STABLE(v2.view_id, {"A": (5, 5), "B": (9, 9), "C": (2, 2)})], 20.2, out)
    assert len(src.calls) == 1
    s.install_view(v2, 20.3, out)  # the same view again keeps the round
    s.install_view(View(ViewId("A", 3), ("A",)), 21.0, out)  # alone: our own gossip completes a round
    s.tick(40.0, out)
    assert src.calls[-1] == {"A": (5, 5)} and len(src.calls) == 2


def test_gossip_timer_is_fixed_and_max_bytes_triggers_a_gossip() -> None:
    s, _, out = lone(desired_avg_gossip=10.0, max_bytes=1000)
    assert s.next_wakeup() == -NEVER
    s.tick(0.0, out)
    assert s.next_wakeup() == 10.0 and s.counters()["stable_sent"] == 1
    s.note_delivered(600)
    assert s.next_wakeup() == 10.0
    s.note_delivered(400)
    assert s.next_wakeup() == -NEVER
    s.tick(3.0, out)
    assert s.counters()["stable_sent"] == 2 and s.counters()["gossips_max_bytes"] == 1
    assert s.next_wakeup() == 10.0 and s.bytes_delivered == 0
    s.tick(10.0, out)
    assert s.counters()["stable_sent"] == 3 and s.next_wakeup() == 20.0


def test_timer_and_bytes_can_be_disabled() -> None:
    s, _, out = lone(desired_avg_gossip=0, max_bytes=0)
    assert s.next_wakeup() == NEVER
    s.note_delivered(10**9)
    assert s.next_wakeup() == NEVER
    s.set_property("max_bytes", 100)
    assert s.next_wakeup() == -NEVER  # already past the new max_bytes
    s.set_property("desired_avg_gossip", "5s")
    s.tick(1.0, out)
    assert s.next_wakeup() == 6.0 and s.counters()["stable_sent"] == 1


def test_no_gossip_without_a_view() -> None:
    s = Stable("A", Source({"A": (1, 1)}))
    out = Effects()
    s.tick(0.0, out)
    assert out.sends == [] and s.is_idle()


def test_properties() -> None:
    p = StableProps()
    assert (p.desired_avg_gossip, p.max_bytes) == (20.0, 2_000_000)
    with pytest.raises(ValueError, match="max_bytes"):
        StableProps(max_bytes=-1).validate()
    with pytest.raises(ValueError, match="unknown property"):
        Stable("A", Source({})).set_property("stability_delay", 1)


# ---------------------------------------------------------------------------------------------------- on Nakack2


class StableNet(Net[Nakack2]):
    """Nakack2 + Stable per member on the shared harness; multicasts go to every member (the sender too), deliveries
    feed max_bytes (as the stack does), and the network delivers batches per (src, dest), as datagrams bundle them."""

    def __init__(self, names: Iterable[str], nak: dict[str, Any] | None = None, **stable: Any) -> None:
        super().__init__()
        self.nak: dict[str, Nakack2] = {}
        self.st: dict[str, Stable] = {}
        for n in names:
            self.nak[n] = Nakack2(n, Nakack2Props(**(nak or {})))
            self.st[n] = Stable(n, self.nak[n], StableProps(**stable))
            self.add(n, self.nak[n], self.st[n])
        v = View(ViewId(self.names[0], 1), self.names)
        for n in self.names:
            out = Effects()
            self.nak[n].install_view(v, 0.0, out)
            self.nak[n].become_server(0.0, out)
            self.st[n].install_view(v, 0.0, out)
            self.absorb(n, out)

    def absorb(self, name: str, out: Effects) -> None:
        super().absorb(name, out)
        for d in out.delivers:
            self.st[name].note_delivered(len(d.payload))

    def mcast(self, src: str, payload: bytes) -> None:
        self.call(src, lambda nak, out: nak.multicast(payload, self.now, out))

    def pump(self, drop: Predicate | None = None, batch: bool = True, max_steps: int = 10**6) -> None:
        super().pump(drop, batch, max_steps)


def test_memory_stays_bounded_under_a_steady_stream() -> None:
    cl = StableNet("ABC", max_bytes=20_000)
    cl.elapse(0.0)
    payload = b"x" * 100
    peak = 0
    for i in range(50_000):
        cl.mcast("ABC"[i % 3], payload)
        if i % 60 == 59:
            cl.elapse(0.005)
            peak = max(peak, *(n.counters()["sender_window_size"] for n in cl.nak.values()))
    cl.elapse(0.005)
    for n in cl.names:
        assert len(cl.delivered[n]) == 50_000
        assert cl.nak[n].counters()["missing_msgs"] == 0 and cl.nak[n].counters()["undelivered_msgs"] == 0
        assert cl.nak[n].counters()["sender_window_size"] < 600
    rounds = [cl.st[n].counters()["stable_rounds"] for n in cl.names]
    assert min(rounds) > 50
    assert peak < 600, peak  # without STABLE each sender window would hold ~16,667 messages
    purged = sum(n.counters()["stable_purged"] for n in cl.nak.values())
    assert purged > 49_000


def test_lagging_member_holds_back_purging() -> None:
    cl = StableNet("ABC", nak={"xmit_interval": 0}, desired_avg_gossip=1.0)
    cl.elapse(0.0)
    for _ in range(10):
        cl.mcast("A", b"a")
    held = [w for w in cl.wire if w[1] == "C" and w[2].seqno > 5]
    cl.pump(drop=lambda w: w[1] == "C" and type(w[2]) is MSG and w[2].seqno > 5)  # C lags behind at 5
    for _ in range(3):
        cl.elapse(1.0)
    a = cl.nak["A"]
    assert cl.st["A"].counters()["stable_rounds"] >= 3
    assert a.counters()["sender_window_size"] == 5 and a.sent.hd == 5  # purged only what C delivered
    cl.wire.extend(held)  # C catches up
    cl.pump()
    cl.elapse(1.0)
    assert a.counters()["sender_window_size"] == 0 and a.counters()["stable_purged"] == 10


def test_stable_round_recovers_a_lost_tail_only_with_retransmission_on() -> None:
    cl = StableNet("ABC", nak={"resend_last_seqno": False}, desired_avg_gossip=1.0)
    cl.elapse(0.0)
    for _ in range(5):
        cl.mcast("A", b"a")
    cl.pump(drop=lambda w: type(w[2]) is MSG and w[2].seqno == 5)
    cl.elapse(1.0)  # a round: A reports (5, 5) for itself, so B and C learn #5 exists
    cl.elapse(1.0)  # their retransmit task asks for it
    assert [len(cl.delivered[n]) for n in "BC"] == [5, 5]
    for n in cl.names:
        cl.nak[n].set_property("xmit_interval", 0)
    for _ in range(5):
        cl.mcast("A", b"a")
    cl.pump(drop=lambda w: type(w[2]) is MSG and w[2].seqno == 10)
    sent_before = [w for w in cl.wire if type(w[2]) is XMIT_REQ]
    for _ in range(5):
        cl.elapse(1.0)
    assert not sent_before and [len(cl.delivered[n]) for n in "BC"] == [9, 9]
    assert all(cl.nak[n].is_idle() for n in "BC")  # stable() did not even note the gap: nothing would ask for it
