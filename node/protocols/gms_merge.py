"""GMS's merge handshake and the multicast window resets of view changes (part of node/protocols/gms.py's Gms).

Merge (the leader is chosen by MERGE): MERGE_REQ(merge_id) to every member of the subgroups the leader can hear,
which answers MERGE_RSP(merge_id, its view, its multicast digest); it takes part in no other merge, and holds back
its application multicasts, until the merge view arrives or `merge_timeout` passes (a busy member rejects: a
MERGE_RSP whose view id counter is 0, and is left out; a retry by the same leader is answered). When every member
asked has answered, the leader installs the merge view of all of them (with a missing answer at `merge_timeout` the
merge is abandoned and MERGE tries again: the digests would be stale): the leader first, then the members grouped by
the view they had installed (its own subgroup first), view id above every id involved, merged_from = those view ids.
VIEW(view, digest, subgroups) goes to every member: digest = each member's own highest seqno, subgroups = which
member came from which view. A member restarts (reset_windows) the multicast windows of the senders that came from
another subgroup than itself or were not in its previous view, at those seqnos (never below what it delivered of
them before): nothing is delivered twice, nothing waited for that only another subgroup had.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from node.protocols.base import Effects, MulticastLayer, StackRoutes
from node.wire import Digest, View, ViewId, header_class, name_of

if TYPE_CHECKING:
    from node.protocols.gms import GmsProps, PendingView


class State(Enum):
    """GMS's states (here because the merge handshake checks them)."""

    INIT = "init"  # not started: the first tick starts discovery
    DISCOVERY = "discovery"
    JOINING = "joining"
    MEMBER = "member"
    LEAVING = "leaving"
    LEFT = "left"


MERGE_REQ = header_class("GMS", "MERGE_REQ")
MERGE_RSP = header_class("GMS", "MERGE_RSP")
CANCEL_MERGE = header_class("GMS", "CANCEL_MERGE")

MAX_REMEMBERED = 1024  # former members whose highest delivered seqno is kept (oldest forgotten first)
REJECT_VIEW_ID_COUNTER = 0  # a MERGE_RSP whose view id counter is 0 rejects the merge (real views start at 1)


@dataclass
class MergeRound:
    """A merge this member leads: the members asked (every member it can hear of the subgroups), answers so far."""

    merge_id: int
    asked: list[str]
    deadline: float
    answers: dict[str, tuple[View, Digest]] = field(default_factory=dict)
    rejected: set[str] = field(default_factory=set)
    # asked because an answer listed them, though the failure detector had not heard from them (yet: right after a
    # heal, the first INFO can come before their first heartbeat); by `unheard_deadline` the merge goes on without
    # those that did not answer (they may be dead)
    unheard: set[str] = field(default_factory=set)
    unheard_deadline: float = 0.0

    def complete(self) -> bool:
        return all(m in self.answers or m in self.rejected for m in self.asked)

    def drop_silent_unheard(self) -> int:
        """At unheard_deadline: the unheard that have not answered are no longer waited for; returns how many."""
        silent = {m for m in self.unheard if m not in self.answers and m not in self.rejected}
        self.asked = [m for m in self.asked if m not in silent]
        self.unheard.clear()
        return len(silent)


Ranges = tuple[tuple[int, int], ...]


def _subgroup_of(view: View, subgroups: Ranges) -> dict[str, ViewId]:
    """member -> the view id of the subgroup it came from, per a merge VIEW's subgroups field."""
    group: dict[str, ViewId] = {}
    for vid, (first, last) in zip(view.merged_from, subgroups, strict=False):
        for m in view.members[first : last + 1]:
            group[m] = vid
    return group


class MergeHandshake:
    """The merge part of Gms (a mixin: the state is Gms's, the view changes it starts are Gms's `_install`,
    `_start_view_change` and `_process_requests`)."""

    local: str
    props: GmsProps
    c: dict[str, int]
    state: State
    view: View | None
    multicast: MulticastLayer | None
    routes: StackRoutes
    _merge: MergeRound | None
    _merge_counter: int
    _merge_id_base: int
    _lock: tuple[int, str, float] | None  # (merge_id, leader, until) as a merge participant
    _delivered: dict[str, int]
    _pending: PendingView | None

    def _remember_delivered(self, mc: MulticastLayer, gone: list[str]) -> None:
        """Before the windows of members leaving our view are dropped: how far we delivered their messages. Should
        they come back (partitions that overlap or flap), their new window starts above it: never twice."""
        if not gone:
            return
        d = mc.digest()
        for m in gone:
            if m in d:
                self._delivered[m] = max(self._delivered.get(m, 0), d[m][0])
        while len(self._delivered) > MAX_REMEMBERED:
            del self._delivered[next(iter(self._delivered))]

    def _above_delivered(self, digest: Digest, reset: list[str]) -> Digest:
        out = dict(digest)
        for m in reset:
            floor = self._delivered.get(m)
            if floor is not None and floor > out[m][1]:
                out[m] = (out[m][0], floor)
        return out

    def _senders_to_reset(self, view: View, digest: Digest, subgroups: Ranges) -> list[str]:
        """The senders whose multicast windows restart at the digest's offsets when `view` replaces ours.

        Those not in our previous view: we dropped their windows or never had one (a fresh window at 0 would wait
        for messages long purged, or deliver again what we delivered before). In a merge view also those that came
        from another subgroup than we did (each told the merge leader which view it had): they purged what only
        their subgroup had (the asymmetric case: they were in our view, we were not in theirs)."""
        previous = self.view
        members = set(view.members)
        candidates = [m for m in digest if m != self.local and m in members]
        if previous is None:
            return candidates
        before = set(previous.members)
        if not view.is_merge or not self.props.reset_subgroup_windows:  # flawed variant: JGRP-940
            return [m for m in candidates if m not in before]
        group = _subgroup_of(view, subgroups)
        ours = group.get(self.local)
        return [m for m in candidates if m not in before or group.get(m) != ours]

    def start_merge(self, reps: dict[ViewId, str], reported: dict[str, ViewId], now: float, out: Effects) -> None:
        """MERGE found subgroups and this member leads: MERGE_REQ to every member of them it can hear (the
        representatives, the members that reported a view id, our own view), so that it learns exactly which view
        each member had installed and its own highest seqno."""
        if self.state is not State.MEMBER or self.view is None:
            return
        if self._busy():
            self.c["merges_busy"] += 1
            return
        if not any(rep != self.local for rep in reps.values()):
            return
        for vid in reps:
            self.note_view_id(vid)
        candidates = set(reps.values()) | set(reported) | set(self.view.members)
        asked = sorted(
            m for m in candidates if m != self.local and (m in reps.values() or m in reported or self._alive(m, now))
        )
        self._merge_counter += 1
        merge_id = self._merge_id_base | (self._merge_counter & 0xFFFFFFFF)
        rnd = MergeRound(merge_id, asked, now + self.props.merge_timeout)
        rnd.unheard_deadline = now + self.props.merge_timeout / 2  # the participants' locks last merge_timeout
        rnd.answers[self.local] = (self.view, self._digest())
        self._merge = rnd
        self.c["merges_started"] += 1
        for m in asked:
            out.send(m, MERGE_REQ(merge_id))
        self.c["merge_reqs_sent"] += len(asked)
        reps_named = sorted({name_of(r) for r in reps.values() if r != self.local})
        out.event("merge_start", merge_id=merge_id, reps=reps_named)

    def _digest(self) -> Digest:
        return self.multicast.digest() if self.multicast is not None else {}

    def _handle_merge_req(self, src: str, merge_id: int, now: float, out: Effects) -> None:
        """Answers with our view and digest, and takes part in no other merge until the merge view arrives or
        merge_timeout passes (a coordinator starts no view change for joins and leaves meanwhile; a busy member
        rejects). Until then the stack holds back our multicasts (`holds_multicasts`), so the digest we answered
        stays true; a regular view, or our own takeover from suspected coordinators, installed meanwhile keeps the
        hold."""
        self.c["merge_reqs_received"] += 1
        lock = self._lock
        same = lock is not None and lock[1] == src  # the leader we answered (a retry replaces its abandoned merge)
        if self.state is not State.MEMBER or self.view is None or (not same and self._busy()):
            reject = View(ViewId(self.local, REJECT_VIEW_ID_COUNTER), (self.local,))
            out.send(src, MERGE_RSP(merge_id, reject, {}))
            self.c["merge_rejects_sent"] += 1
            return
        self._lock = (merge_id, src, now + self.props.merge_timeout)
        out.send(src, MERGE_RSP(merge_id, self.view, self._digest()))
        self.c["merge_rsps_sent"] += 1

    def _handle_merge_rsp(self, src: str, merge_id: int, view: View, digest: Digest, now: float, out: Effects) -> None:
        self.c["merge_rsps_received"] += 1
        rnd = self._merge
        if rnd is None or rnd.merge_id != merge_id or src not in rnd.asked:
            return
        if view.view_id.id == REJECT_VIEW_ID_COUNTER:
            self.c["merge_rejects_received"] += 1
            rnd.rejected.add(src)
        else:
            self.note_view_id(view.view_id)
            rnd.answers[src] = (view, digest)
            # members of its view we did not know of (no INFO from them yet): ask them too; those the failure detector
            # has not heard from are not waited for past unheard_deadline
            more = [
                m
                for m in (view.members if self.props.merge_ask_listed_members else ())
                if m != self.local and m not in rnd.asked
            ]
            for m in more:
                rnd.asked.append(m)
                if not self._alive(m, now):
                    rnd.unheard.add(m)
                    self.c["merge_unheard_asked"] += 1
                out.send(m, MERGE_REQ(merge_id))
            self.c["merge_reqs_sent"] += len(more)
        if rnd.complete():
            self._finish_merge(now, out)

    def _finish_merge(self, now: float, out: Effects) -> None:
        """Every member asked answered: install the merge view of all that did not reject, grouped by the view each
        had installed, unless that is just our own view."""
        rnd = self._merge
        self._merge = None
        if rnd is None or self.view is None:
            return
        answers = rnd.answers  # members that rejected (busy in another merge) are left out: a later merge takes them
        own_id = self.view.view_id
        groups: dict[ViewId, list[str]] = {own_id: []}
        for m in [self.local, *sorted(m for m in answers if m != self.local)]:
            groups.setdefault(answers[m][0].view_id, []).append(m)
        if len(groups) < 2:  # everyone has our view by now
            self._merge = rnd
            self._abandon_merge(now, out)
            return
        members: list[str] = []
        subgroups: list[tuple[int, int]] = []
        for group in groups.values():  # our subgroup first, the others in the order we heard of them
            order = answers[group[0]][0].members
            first = len(members)
            members.extend(sorted(group, key=lambda m, order=order: order.index(m)))  # type: ignore[misc]
            subgroups.append((first, len(members) - 1))
        members.remove(self.local)  # the leader coordinates; it stays inside its own subgroup's range
        members.insert(0, self.local)
        merged_from = tuple(groups)
        new_view = View(self._new_view_id(self.local, *(v.id for v in merged_from)), tuple(members), merged_from)
        # each member's own highest seqno: receivers from other subgroups start after it
        merged: Digest = {m: answers[m][1].get(m, (0, 0)) for m in members}
        self.c["merges_completed"] += 1
        self._install(new_view, now, out, merged, tuple(subgroups))
        self._start_view_change(new_view, now, out, merge=(merged, tuple(subgroups)))

    def _abandon_merge(self, now: float, out: Effects) -> None:
        rnd = self._merge
        if rnd is not None:
            self.c["merges_abandoned"] += 1
            out.event("merge_abandoned", merge_id=rnd.merge_id)
        self._cancel_merge(out)
        self._process_requests(now, out)

    def _cancel_merge(self, out: Effects) -> None:
        """Drops the merge we lead, if any, and frees the members that answered it (JGroups' CANCEL_MERGE): they
        would otherwise hold back their multicasts and refuse other merges until merge_timeout."""
        rnd = self._merge
        self._merge = None
        if rnd is None:
            return
        answered = [m for m in rnd.answers if m != self.local]
        for m in answered:
            out.send(m, CANCEL_MERGE(rnd.merge_id))
        self.c["merge_cancels_sent"] += len(answered)

    def _handle_cancel_merge(self, src: str, merge_id: int, now: float, out: Effects) -> None:
        self.c["merge_cancels_received"] += 1
        lock = self._lock
        if lock is not None and lock[0] == merge_id and lock[1] == src:
            self._lock = None
            self._process_requests(now, out)

    def _alive(self, member: str, now: float) -> bool:
        return self.routes.alive(member, now)
