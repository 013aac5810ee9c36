"""GMS, FD and MERGE state machines on their own: a tiny instant network of Gms instances with a fake multicast
protocol that records what membership asks of it (install_view, set_digest, become_server, reset_windows)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from node.protocols.base import NEVER, Effects, Event
from node.protocols.fd import Fd, FdProps
from node.protocols.gms import FIND, FIND_RSP, JOIN_REQ, MERGE_REQ, MERGE_RSP, VIEW, VIEW_ACK, Gms, GmsProps, State
from node.protocols.merge import INFO, Merge, Merge3Props
from node.stack import STACKS, build_stack
from node.wire import Digest, View, ViewId
from tests.unit.harness import Net, never

FAST = {
    "discovery_timeout": 0.5,
    "join_timeout": 0.5,
    "view_ack_collection_timeout": 0.5,
    "view_xmit_interval": 0.1,
    "leave_timeout": 0.5,
    "merge_timeout": 1.0,
}


class FakeMulticast:
    """Records membership's calls; its digest is {local: (purged, hs)} plus whatever `windows` holds."""

    NAME = "nakack2"
    PROTOCOL = "NAKACK2"

    def __init__(self, local: str) -> None:
        self.local = local
        self.hs = 0
        self.purged = 0
        self.windows: Digest = {}
        self.calls: list[tuple[Any, ...]] = []

    def install_view(self, view: View, now: float, out: Effects) -> None:
        self.calls.append(("install_view", str(view.view_id)))

    def digest(self) -> Digest:
        return {self.local: (self.purged, self.hs), **self.windows}

    def set_digest(self, digest: Digest, now: float, out: Effects) -> None:
        self.calls.append(("set_digest", dict(digest)))

    def reset_windows(self, digest: Digest, members: list[str], now: float, out: Effects) -> None:
        self.calls.append(("reset_windows", {m: digest[m] for m in members}))

    def become_server(self, now: float, out: Effects) -> None:
        self.calls.append(("become_server",))

    def close(self) -> None:
        self.calls.append(("close",))

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]


class GmsNet(Net[Gms]):
    """Gms members on the shared harness, each with a FakeMulticast below it; instant, in-order delivery (`cuts`
    and `drop` lose messages on the way)."""

    def __init__(self) -> None:
        super().__init__(instant=True)
        self.mc: dict[str, FakeMulticast] = {}

    @property
    def gms(self) -> dict[str, Gms]:
        return self.nodes

    def add_member(self, name: str, **props: Any) -> Gms:
        p = GmsProps()
        p.update({**FAST, **props})
        mc = FakeMulticast(name)
        g = Gms(name, p, multicast=mc)  # type: ignore[arg-type]
        self.mc[name] = mc
        self.add(name, g)
        return g

    def member(self, name: str, view: View) -> Gms:
        """A member that already has `view` installed (as if it had joined)."""
        g = self.gms.get(name) or self.add_member(name)
        g.s.state = State.MEMBER
        g.views.install(view, self.now, Effects())
        self.mc[name].calls.clear()
        return g


def view(creator: str, n: int, members: str, merged: tuple[ViewId, ...] = ()) -> View:
    return View(ViewId(creator, n), tuple(members), merged)


# --- properties ----------------------------------------------------------------------------------------------------


def test_properties_have_jgroups_names_and_defaults() -> None:
    assert GmsProps().as_dict() == {
        "join_timeout": 2.0,
        "discovery_timeout": 2.0,
        "break_on_coord_rsp": True,
        "max_join_attempts": 10,
        "view_ack_collection_timeout": 2.0,
        "view_xmit_interval": 0.5,
        "leave_timeout": 2.0,
        "merge_timeout": 5.0,
        "reset_subgroup_windows": True,
        "merge_ask_listed_members": True,
    }
    assert FdProps().as_dict() == {"interval": 8.0, "timeout": 40.0, "timeout_check_interval": 2.0}
    m = Merge3Props()
    assert (m.min_interval, m.max_interval, m.max_participants_in_merge) == (1.0, 10.0, 100)
    assert m.effective_check_interval() == pytest.approx(16.0)  # MERGE3: max_interval * 1.6


def test_properties_parse_durations_and_name_bad_values() -> None:
    g = Gms("A")
    g.set_property("join_timeout", "300ms")
    assert g.props.join_timeout == pytest.approx(0.3)
    with pytest.raises(ValueError, match=r"gms\.merge_timeout"):
        g.set_property("merge_timeout", "0s")
    with pytest.raises(ValueError, match="unknown property"):
        g.set_property("join_timout", 1)
    with pytest.raises(ValueError, match=r"fd\.timeout"):
        FdProps(timeout=0).validate()
    with pytest.raises(ValueError, match="min_interval <= max_interval"):
        Merge3Props(min_interval=2, max_interval=1).validate()


def test_properties_are_validated_together_and_a_refused_change_changes_nothing() -> None:
    """min_interval 60 s is above the default max_interval (10 s): set together with a max above it, the pair is
    valid (it was refused when each property was checked as it was set). A refused change leaves every value as it
    was, also on a running member (`set`)."""
    m = Merge3Props()
    m.update({"min_interval": "60s", "max_interval": "120s"})
    assert (m.min_interval, m.max_interval) == (60.0, 120.0)
    with pytest.raises(ValueError, match="min_interval <= max_interval"):
        m.update({"min_interval": "1s", "max_interval": "0.5s"})
    assert (m.min_interval, m.max_interval) == (60.0, 120.0)
    with pytest.raises(ValueError, match="min_interval <= max_interval"):
        m.set("min_interval", "200s")
    assert m.min_interval == 60.0
    g = Gms("A")
    with pytest.raises(ValueError, match=r"gms\.merge_timeout"):
        g.set_property("merge_timeout", "0s")
    assert g.props.merge_timeout == GmsProps().merge_timeout


# --- discovery and join --------------------------------------------------------------------------------------------


def test_a_lone_member_becomes_a_singleton_coordinator_after_discovery() -> None:
    net = GmsNet()
    a = net.add_member("A")
    assert a.next_wakeup() == -NEVER  # the first tick starts discovery
    net.run_timers(0.0)
    assert net.sent(FIND) and a.state is State.DISCOVERY
    net.run_timers(0.49)
    assert a.view is None
    net.run_timers(0.5)
    assert a.view == view("A", 1, "A") and a.is_coord
    assert net.mc["A"].names() == ["install_view", "become_server"]
    ev = [e for e in net.events["A"] if e.kind == "view"]
    assert ev == [
        Event("view", {"view_id": "A|1", "members": ["A"], "merge": False, "addresses": ["A"], "merged_from": []})
    ]


def test_joiner_gets_view_and_digest_and_installs_them_before_becoming_server() -> None:
    net = GmsNet()
    net.member("A", view("A", 1, "A"))
    net.mc["A"].hs = 7
    net.mc["A"].windows = {"X": (3, 4)}
    net.add_member("B/2")  # an address of a restarted member: names in history, addresses on the wire
    net.run_timers(0.0)  # B/2's FIND; A answers with its view id: a coordinator, so B/2 joins at once
    b = net.gms["B/2"]
    assert b.state is State.MEMBER and b.view == view("A", 2, ["A", "B/2"])  # type: ignore[arg-type]
    assert net.mc["B/2"].calls == [
        ("install_view", "A|2"),
        ("set_digest", {"A": (0, 7), "X": (3, 4)}),
        ("become_server",),
    ]
    assert [e.fields["members"] for e in net.events["B/2"] if e.kind == "view"] == [["A", "B"]]


def test_joins_wait_for_the_old_members_acks_and_are_bundled() -> None:
    net = GmsNet()
    net.member("A", view("A", 2, "AB"))
    net.member("B", view("A", 2, "AB"))
    net.drop = lambda w: type(w[2]) is VIEW_ACK  # B's acks are lost
    for j in ("C", "D"):
        net.add_member(j)
    net.call("C", lambda g, out: out.sends.append(("A", JOIN_REQ())))  # C asks first: its view change starts
    net.call("D", lambda g, out: out.sends.append(("A", JOIN_REQ())))  # D waits for the next one
    a = net.gms["A"]
    assert a.view == view("A", 3, "ABC") and net.gms["B"].view == a.view
    assert net.gms["C"].view is None  # no JOIN_RSP before B acked or the ack timeout
    net.run_timers(0.45)
    assert len(net.sent(VIEW, "A", "B")) == 5  # first send + 4 resends at view_xmit_interval
    net.run_timers(0.5)  # view_ack_collection_timeout: C is answered, D's join is the next view
    assert [e.fields["view_id"] for e in net.events["C"] if e.kind == "view"] == ["A|3", "A|4"]  # joined A|3
    assert a.c["view_ack_timeouts"] == 1
    net.drop = never
    net.run_timers(1.5)
    assert {str(net.gms[n].view.view_id) for n in "ABCD"} == {"A|4"}  # type: ignore[union-attr]


def test_members_joining_together_elect_the_smallest_address() -> None:
    net = GmsNet()
    for n in ("C", "A", "B"):
        net.add_member(n)
    net.run_timers(3.0)
    views = {net.gms[n].view for n in "ABC"}
    assert len(views) == 1 and views.pop().members[0] == "A"  # type: ignore[union-attr]
    assert net.gms["A"].is_coord and sum(g.c["singletons"] for g in net.gms.values()) == 1


def test_nobody_answering_the_join_request_makes_a_singleton_after_max_join_attempts() -> None:
    net = GmsNet()
    net.member("A", view("A", 1, "A"))
    net.add_member("B", max_join_attempts=3)
    net.drop = lambda w: type(w[2]) is JOIN_REQ
    net.run_timers(5.0)
    b = net.gms["B"]
    assert b.c["join_attempts"] == 3 and b.c["join_timeouts"] == 3
    assert b.view is not None and b.view.members == ("B",)


# --- leave and exclusion -------------------------------------------------------------------------------------------


def test_member_leaves_gracefully() -> None:
    net = GmsNet()
    for n in "ABC":
        net.member(n, view("A", 3, "ABC"))
    net.call("B", lambda g, out: g.leave(net.now, out))
    assert net.gms["B"].has_left and net.gms["A"].view == view("A", 4, "AC")
    assert net.gms["C"].view == view("A", 4, "AC")
    assert ("close",) in net.mc["B"].calls


def test_a_member_that_left_through_us_is_not_asked_into_a_merge() -> None:
    """B's last INFO (view A|3) arrives after A installed A|4 without it: a merge would ask B, which never answers,
    and A would hold its multicasts for merge_timeout (scenarios/regressions/gms-merge-asks-departed-member.toml,
    found by explore). An excluded member that is still alive (C here) is asked as before."""
    net = GmsNet()
    for n in "ABCD":
        net.member(n, view("A", 4, "ABCD"))
    net.call("B", lambda g, out: g.leave(net.now, out))
    a = net.gms["A"]
    assert a.view == view("A", 5, "ACD")
    net.call(
        "A", lambda g, out: g.start_merge({ViewId("A", 5): "A", ViewId("A", 4): "B"}, {"B": ViewId("A", 4)}, 0, out)
    )
    assert a.s.merge is None and not a.holds_multicasts and not net.sent(MERGE_REQ, "A", "B")
    assert a.c["merges_started"] == 0 and a.c["merge_departed_skipped"] == 1
    net.cuts.add(("A", "C"))
    net.call("A", lambda g, out: g.suspect("C", net.now, out))
    assert a.view == view("A", 6, "AD")
    net.call(
        "A", lambda g, out: g.start_merge({ViewId("A", 6): "A", ViewId("A", 5): "C"}, {"C": ViewId("A", 5)}, 0, out)
    )
    assert a.s.merge is not None and a.holds_multicasts and a.c["merges_started"] == 1


def test_leaving_coordinator_hands_over_to_the_next_member() -> None:
    net = GmsNet()
    for n in "ABC":
        net.member(n, view("A", 3, "ABC"))
    net.call("A", lambda g, out: g.leave(net.now, out))
    assert net.gms["A"].has_left
    assert net.gms["B"].view == view("B", 4, "BC") and net.gms["B"].is_coord


def test_leave_without_answer_gives_up_after_leave_timeout() -> None:
    net = GmsNet()
    for n in "AB":
        net.member(n, view("A", 2, "AB"))
    net.cuts.add(("B", "A"))
    net.call("B", lambda g, out: g.leave(net.now, out))
    net.run_timers(0.45)
    assert not net.gms["B"].has_left and net.gms["B"].c["leave_reqs_sent"] == 5
    net.run_timers(0.5)
    assert net.gms["B"].has_left and net.gms["B"].c["leave_timeouts"] == 1


def test_coordinator_excludes_suspects_and_takeover_needs_every_earlier_member_suspected() -> None:
    net = GmsNet()
    for n in "ABCD":
        net.member(n, view("A", 4, "ABCD"))
    net.call("A", lambda g, out: g.suspect("D", net.now, out))
    assert net.gms["B"].view == view("A", 5, "ABC")
    net.call("C", lambda g, out: g.suspect("A", net.now, out))
    assert net.gms["C"].view == view("A", 5, "ABC")  # B is not suspected: C waits for B to take over
    net.cuts |= {("A", "B"), ("A", "C")}
    net.call("B", lambda g, out: g.suspect("A", net.now, out))
    assert net.gms["B"].view == view("B", 6, "BC") and net.gms["C"].view == view("B", 6, "BC")
    assert net.gms["B"].c["takeovers"] == 1


def test_restarted_member_replaces_its_old_incarnation() -> None:
    net = GmsNet()
    for n in "AB":
        net.member(n, view("A", 2, "AB"))
    net.add_member("B/2")
    net.run_timers(0.0)
    assert net.gms["A"].view == view("A", 3, ["A", "B/2"])  # type: ignore[arg-type]


# --- views ---------------------------------------------------------------------------------------------------------


def test_stale_and_foreign_views_are_acked_but_not_installed() -> None:
    net = GmsNet()
    for n in "ABC":
        net.member(n, view("A", 5, "ABC"))
    c = net.gms["C"]
    net.call("B", lambda g, out: out.sends.append(("C", VIEW(view("A", 4, "ABC"), {}, ()))))
    net.call("B", lambda g, out: out.sends.append(("C", VIEW(view("D", 9, "DC"), {}, ()))))  # D: not in our view
    assert c.view == view("A", 5, "ABC")
    assert c.c["stale_views_dropped"] == 1 and c.c["foreign_views_dropped"] == 1 and c.c["view_acks_sent"] == 2


def test_a_view_resets_the_windows_of_senders_new_to_us_at_the_coordinators_digest() -> None:
    net = GmsNet()
    net.member("C", view("A", 5, "AC"))
    net.add_member("A")
    out = Effects()
    net.gms["C"].handle("A", [VIEW(view("A", 6, "ACE"), {"A": (9, 9), "C": (2, 3), "E": (4, 6)}, ())], 0.0, out)
    # the coordinator's receive window for E: we restart after its highest received, as a joiner
    assert net.mc["C"].calls == [("install_view", "A|6"), ("reset_windows", {"E": (6, 6)})]


def test_a_sender_coming_back_never_restarts_below_what_we_delivered() -> None:
    net = GmsNet()
    net.member("C", view("A", 5, "ACE"))
    net.mc["C"].windows = {"E": (12, 12)}
    g = net.gms["C"]
    g.views.handle_view("A", view("A", 6, "AC"), {}, (), 0.0, Effects())  # E leaves our view: we delivered up to 12
    g.views.handle_view("A", view("A", 7, "ACE"), {"E": (4, 6)}, (), 0.0, Effects())
    assert net.mc["C"].calls[-1] == ("reset_windows", {"E": (12, 12)})


# --- merge ---------------------------------------------------------------------------------------------------------


def two_subgroups() -> GmsNet:
    net = GmsNet()
    for n in "AB":
        net.member(n, view("A", 5, "AB"))
    for n in "CD":
        net.member(n, view("C", 6, "CD"))
    for n, hs in zip("ABCD", (10, 20, 30, 40), strict=True):
        net.mc[n].hs = hs
        net.mc[n].purged = hs - 5
    return net


def test_merge_installs_one_view_of_both_subgroups_and_resets_the_other_subgroups_windows() -> None:
    net = two_subgroups()
    reps = {ViewId("A", 5): "A", ViewId("C", 6): "C"}
    reported = {"C": ViewId("C", 6), "D": ViewId("C", 6)}
    net.call("A", lambda g, out: g.start_merge(reps, reported, net.now, out))
    assert sorted(d for _, d, m in net.sends if type(m) is MERGE_REQ) == ["B", "C", "D"]  # D: listed in C's view
    merged = View(ViewId("A", 7), ("A", "B", "C", "D"), (ViewId("A", 5), ViewId("C", 6)))
    assert all(net.gms[n].view == merged for n in "ABCD")
    vmsg = net.sent(VIEW, "A", "C")[0]
    assert vmsg.subgroups == ((0, 1), (2, 3))
    assert vmsg.digest == {"A": (5, 10), "B": (15, 20), "C": (25, 30), "D": (35, 40)}  # each one's own entry
    # senders new to our view: after their highest seqno (nothing they sent outside our view is owed to us)
    assert net.mc["A"].calls[-1] == ("reset_windows", {"C": (30, 30), "D": (40, 40)})
    assert net.mc["D"].calls[-1] == ("reset_windows", {"A": (10, 10), "B": (20, 20)})
    assert [e.fields["merge"] for e in net.events["D"] if e.kind == "view"] == [True]


def test_asymmetric_merge_resets_a_member_of_our_view_that_came_from_another_subgroup() -> None:
    net = GmsNet()
    for n in "AB":
        net.member(n, view("A", 5, "ABC"))
    net.member("C", view("C", 6, "C"))
    for n, (purged, hs) in zip("ABC", ((1, 4), (2, 5), (3, 6)), strict=True):
        net.mc[n].purged, net.mc[n].hs = purged, hs
    net.call("A", lambda g, out: g.start_merge({ViewId("A", 5): "A", ViewId("C", 6): "C"}, {}, net.now, out))
    assert net.gms["B"].view.members == ("A", "B", "C")  # type: ignore[union-attr]
    # C was in B's view, but not B in C's: B restarts at what C can still resend, (purged, highest sent)
    assert net.mc["B"].calls[-1] == ("reset_windows", {"C": (3, 6)})
    assert net.mc["C"].calls[-1] == ("reset_windows", {"A": (4, 4), "B": (5, 5)})  # new to C's view


def test_merge_participants_hold_multicasts_and_a_busy_one_rejects() -> None:
    net = two_subgroups()
    net.drop = lambda w: type(w[2]) is VIEW  # the merge view does not arrive
    net.call("C", lambda g, out: g.start_merge({ViewId("C", 6): "C", ViewId("A", 5): "A"}, {}, net.now, out))
    a = net.gms["A"]
    assert a.holds_multicasts and a.s.lock is not None  # answered C's merge
    net.call("A", lambda g, out: g.start_merge({ViewId("A", 5): "A", ViewId("C", 6): "C"}, {}, net.now, out))
    assert a.c["merges_busy"] == 1
    net.call("B", lambda g, out: out.sends.append(("A", MERGE_REQ(99))))
    assert net.sent(MERGE_RSP, "A", "B")[0].view.view_id.id == 0  # rejected
    net.run_timers(1.0)  # merge_timeout: the lock expires
    assert not a.holds_multicasts and a.c["merge_lock_timeouts"] == 1


def test_an_abandoned_merge_frees_its_participants_at_once() -> None:
    net = GmsNet()
    for n in "AB":
        net.member(n, view("A", 5, "AB"))
    # a stale report made A think B had another view: B answers with A's own view, nothing to merge
    net.call("A", lambda g, out: g.start_merge({ViewId("A", 5): "A", ViewId("A", 4): "B"}, {}, net.now, out))
    a, b = net.gms["A"], net.gms["B"]
    assert a.c["merges_abandoned"] == 1 and a.c["merge_cancels_sent"] == 1
    assert b.s.lock is None and not b.holds_multicasts and b.c["merge_cancels_received"] == 1


def test_merge_without_all_answers_is_abandoned_at_merge_timeout() -> None:
    net = two_subgroups()
    net.cuts.add(("D", "A"))
    net.call("A", lambda g, out: g.start_merge({ViewId("A", 5): "A", ViewId("C", 6): "C"}, {}, net.now, out))
    net.run_timers(1.0)
    assert net.gms["A"].view == view("A", 5, "AB") and net.gms["A"].c["merges_abandoned"] == 1


def test_stack_holds_multicasts_during_a_merge_and_keeps_the_seqnos_it_promised() -> None:
    s = build_stack("A", "unicast3+nakack2")
    g = s.gms
    g.s.state = State.MEMBER
    g.views.install(view("A", 1, "A"), 0.0, s.out)
    s.multicast_protocol.become_server(0.0, s.out)
    assert s.multicast(b"x\0", 0.0) == 1
    g.s.lock = (1, "B", 5.0)
    assert [s.multicast(b"y\0", 0.0), s.multicast(b"z\0", 0.0)] == [2, 3]
    assert s.multicast_protocol.digest()["A"] == (0, 1)  # held back: the digest we answered stays true
    g.s.lock = None
    s.tick(0.1)
    assert s.multicast_protocol.digest()["A"][1] == 3
    assert [d.seqno for d in s.drain().delivers] == [1, 2, 3]


def test_stack_holds_multicasts_until_the_member_has_joined() -> None:
    """A restarted member's application multicasts before its JOIN_RSP: none goes out (a JGroups channel cannot send
    before connect returns). The coordinator may list it already and deliver them, then exclude it (its JOIN_RSP
    lost) and take it in again with a fresh window at 0, which delivered them twice
    (scenarios/regressions/gms-multicast-before-join.toml). Once joined they go out, in order, with the
    seqnos promised."""
    s = build_stack("A/2", "unicast3+nakack2")
    g = s.gms
    assert isinstance(g, Gms) and g.holds_multicasts  # INIT: not even discovering yet
    assert s.multicast(b"x\0", 0.0) == 1
    s.tick(0.0)  # starts discovery: FIND
    assert g.state is State.DISCOVERY and g.holds_multicasts
    assert s.multicast(b"y\0", 0.1) == 2
    g.s.state = State.JOINING  # JOIN_REQ sent to B; its JOIN_RSP is lost, so nothing changes
    s.tick(0.2)
    assert s.multicast_protocol is not None and s.multicast_protocol.digest()["A/2"] == (0, 0)  # nothing sent
    assert s.c["multicasts_held"] == 2 and s.missing_from()["A/2"] == 2  # the quiet check waits for them
    assert [d.seqno for d in s.drain().delivers] == []
    g.joining.handle_join_rsp(view("B", 5, ["B", "A/2"]), {"B": (0, 0)}, 0.3, s.out)
    s.tick(0.3)
    assert not g.holds_multicasts and s.multicast_protocol.digest()["A/2"] == (0, 2)
    assert [d.seqno for d in s.drain().delivers if d.sender == "A/2"] == [1, 2]


# --- FD and MERGE --------------------------------------------------------------------------------------------------


class Recorder:
    is_coord = False
    coordinator = "A"

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []

    def suspect(self, member: str, now: float, out: Effects) -> None:
        self.log.append(("suspect", member))

    def suspect_all(self, members: list[str], now: float, out: Effects) -> None:
        self.log.append(("suspect_all", ",".join(members)))

    def unsuspect(self, member: str, now: float, out: Effects) -> None:
        self.log.append(("unsuspect", member))


def fd_until_six_seconds(local: str, members: str, rec: Recorder) -> tuple[Fd, Effects]:
    """An FD (timeout 5 s, checks every second) of `local` in view A|1 of `members`, B heard at 4 s, run to 6 s."""
    fd = Fd(local, FdProps(interval=1.0, timeout=5.0, timeout_check_interval=1.0), membership=rec)
    fd.install_view(view("A", 1, members), 0.0, Effects())
    fd.handle("B", [], 4.0, Effects())
    t, out = 0.0, Effects()
    while t < 6.0:
        t = fd.next_wakeup()
        fd.tick(t, out)
    return fd, out


def test_fd_hands_the_members_one_check_suspects_to_gms_together() -> None:
    rec = Recorder()
    fd_until_six_seconds("A", "ABCD", rec)
    assert rec.log == [("suspect_all", "C,D")]  # one call: GMS excludes both in one view


def test_fd_suspects_after_timeout_reports_to_the_coordinator_and_unsuspects_on_a_heartbeat() -> None:
    rec = Recorder()
    fd, out = fd_until_six_seconds("C", "ABC", rec)
    assert rec.log == [("suspect_all", "A")]  # B was heard at 4.0
    assert ("A", header("FD", "SUSPECT")("A")) not in out.sends  # never report the coordinator to itself
    fd.handle("A", [header("FD", "HEARTBEAT")()], 6.5, Effects())
    assert rec.log[-1] == ("unsuspect", "A")
    assert fd.c["heartbeats_sent"] >= 6


def test_fd_coordinator_refutes_a_suspicion_of_a_member_it_hears() -> None:
    rec = Recorder()
    rec.is_coord = True
    fd = Fd("A", FdProps(interval=1.0, timeout=4.0), membership=rec)
    fd.install_view(view("A", 1, "ABC"), 0.0, Effects())
    fd.handle("C", [], 1.0, Effects())
    fd.handle("B", [header("FD", "SUSPECT")("C")], 2.0, Effects())  # heard C 1 s ago: refuted
    fd.handle("B", [header("FD", "SUSPECT")("C")], 3.5, Effects())  # not for 2.5 s >= timeout / 2: accepted
    assert fd.c["suspect_reports_refuted"] == 1 and rec.log == [("suspect", "C")]


def header(protocol: str, name: str) -> Any:
    from node.wire import header_class

    return header_class(protocol, name)


class MergeRecorder:
    def __init__(self) -> None:
        self.calls: list[dict[ViewId, str]] = []

    def note_view_id(self, view_id: ViewId) -> None:
        pass

    def start_merge(self, reps: dict[ViewId, str], reported: dict[str, ViewId], now: float, out: Effects) -> None:
        self.calls.append(reps)


@pytest.mark.parametrize(
    ("local", "leads"),
    [("A", True), ("C", False)],
)
def test_merge_leader_is_the_smallest_representative(local: str, leads: bool) -> None:
    rec = MergeRecorder()
    m = Merge(local, Merge3Props(min_interval=0.1, max_interval=0.5), membership=rec)
    own = view("A", 5, "AB") if local == "A" else view("C", 6, "CD")
    m.install_view(own, 0.0, Effects())
    m.handle("B", [INFO(ViewId("A", 5))], 0.1, Effects())
    m.handle("D", [INFO(ViewId("C", 6))], 0.1, Effects())
    if local == "C":
        m.handle("A", [INFO(ViewId("A", 5))], 0.1, Effects())
    else:
        m.handle("C", [INFO(ViewId("C", 6))], 0.1, Effects())
    m._check(0.5, Effects())
    expected = [{ViewId("A", 5): "A", ViewId("C", 6): "C"}] if leads else []
    assert rec.calls == expected


def test_merge_info_jitter_is_seeded_and_within_the_interval() -> None:
    def schedule(seed: int) -> list[float]:
        m = Merge("A", Merge3Props(min_interval=1.0, max_interval=2.0), seed=seed)
        m.install_view(view("A", 1, "A"), 0.0, Effects())
        times, out = [], Effects()
        while len(times) < 20:
            t = m.next_wakeup()
            n = len(out.sends)
            m.tick(t, out)
            if len(out.sends) > n:
                times.append(t)
        return times

    a, b, c = schedule(1), schedule(1), schedule(2)
    assert a == b and a != c
    assert a[0] <= 1.0  # soon after a view is installed
    assert all(1.0 <= y - x <= 2.0 + 1e-9 for x, y in itertools.pairwise(a))


def test_stacks_with_membership_wire_their_protocols() -> None:
    assert {"unicast3+nakack2", "unicast3+mcast", "unicast2+nakack2", "unicast3+gms"} <= set(STACKS)
    s = build_stack("A", "unicast3+nakack2", {"gms": {"join_timeout": "1s"}, "merge": {"max_interval": "3s"}})
    assert list(s.by_name) == ["unicast3", "nakack2", "stable", "gms", "fd", "merge"]
    g = s.gms
    assert g.s.multicast is s.multicast_protocol and g.s.routes.liveness is s.by_name["fd"]
    assert s.by_name["fd"].membership is g
    assert s.by_name["merge"].membership is g and s.by_name["merge"].liveness is s.by_name["fd"]
    assert g.s.routes.others == [s.by_name[n] for n in ("unicast3", "nakack2", "stable", "fd", "merge")]
    assert s.by_name["stable"].source is s.multicast_protocol and g.props.join_timeout == 1.0
    assert list(build_stack("A", "unicast3+mcast").by_name) == ["unicast3", "mcast", "gms", "fd", "merge"]
    with pytest.raises(ValueError, match="unknown protocols: gmss"):
        build_stack("A", "unicast3+gms", {"gmss": {}})


def test_a_find_heard_while_discovering_counts_as_a_joiner_and_the_smallest_calls_the_others_in() -> None:
    """B discovers alone; A's FIND reaches it: at the end of its discovery B (not the smallest joiner) asks again
    instead of becoming a singleton. A, which heard of B, coordinates at the end of its own discovery and tells B,
    which joins it at once."""
    p = GmsProps()
    p.update(FAST)
    a, b = Gms("A", p), Gms("B", p)
    out = Effects()
    b.tick(0.0, out)
    assert b.state is State.DISCOVERY and out.sends == [(None, FIND())]
    a.tick(0.3, Effects())
    out = Effects()
    b.handle("A", [FIND()], 0.3, out)
    assert out.sends == [("A", FIND_RSP(ViewId("B", 0)))]
    a.handle("B", [FIND_RSP(ViewId("B", 0))], 0.3, Effects())
    out = Effects()
    b.tick(0.5, out)  # B's discovery is over: no FIND_RSP, but A is a smaller joiner
    assert b.state is State.DISCOVERY and out.sends == [(None, FIND())]
    assert b.counters()["singletons"] == 0 and b.counters()["join_attempts"] == 2
    out = Effects()
    a.tick(0.8, out)
    assert a.is_coord and a.view is not None and a.view.members == ("A",)
    assert out.sends == [("B", FIND_RSP(a.view.view_id))]  # unasked: B is waiting for it
    out = Effects()
    b.handle("A", [FIND_RSP(a.view.view_id)], 0.8, out)
    assert b.state is State.JOINING and out.sends == [("A", JOIN_REQ())]
