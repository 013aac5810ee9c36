"""GMS's merge handshake (a component of node/protocols/gms.py's Gms, over its GmsState; the merge view is installed
and sent by gms_views.py's view changes).

Merge (the leader is chosen by MERGE): MERGE_REQ(merge_id) to every member of the subgroups the leader can hear,
which answers MERGE_RSP(merge_id, its view, its multicast digest); it takes part in no other merge, and holds back
its application multicasts, until the merge view arrives or `merge_timeout` passes (a busy member rejects: a
MERGE_RSP whose view id counter is 0, and is left out; a retry by the same leader is answered). When every member
asked has answered, the leader installs the merge view of all of them (with a missing answer at `merge_timeout` the
merge is abandoned and MERGE tries again: the digests would be stale): the leader first, then the members grouped by
the view they had installed (its own subgroup first), view id above every id involved, merged_from = those view ids.
VIEW(view, digest, subgroups) goes to every member: digest = each member's own entry (purged, highest sent),
subgroups = which member came from which view; each member restarts the windows of the other subgroups' senders
(gms_views.py).
"""

from __future__ import annotations

from node.addresses import name_of
from node.protocols.base import Effects
from node.protocols.gms_state import GmsState, MergeRound, State
from node.protocols.gms_views import ViewChanges
from node.wire import Digest, View, ViewId
from node.wire_headers import GMS_MERGE_REQ as MERGE_REQ
from node.wire_headers import GMS_MERGE_RSP as MERGE_RSP

REJECT_VIEW_ID_COUNTER = 0  # a MERGE_RSP whose view id counter is 0 rejects the merge (real views start at 1)


class MergeHandshake:
    """The merge handshake: the leader's round and a participant's answer and lock."""

    def __init__(self, s: GmsState, views: ViewChanges) -> None:
        self.s = s
        self.views = views

    def start(self, reps: dict[ViewId, str], reported: dict[str, ViewId], now: float, out: Effects) -> None:
        """MERGE found subgroups and this member leads: MERGE_REQ to every member of them it can hear (the
        representatives, the members that reported a view id, our own view), so that it learns exactly which view
        each member had installed and its own highest seqno."""
        s = self.s
        if s.state is not State.MEMBER or s.view is None:
            return
        if s.busy():
            s.c["merges_busy"] += 1
            return
        gone = [m for m in {*reps.values(), *reported} if m in s.departed]
        if gone:  # a stale INFO of a member that left through us: it would never answer, and we would hold for nothing
            s.c["merge_departed_skipped"] += len(gone)
            reps = {vid: rep for vid, rep in reps.items() if rep not in s.departed}
            reported = {m: vid for m, vid in reported.items() if m not in s.departed}
        if not any(rep != s.local for rep in reps.values()):
            return
        for vid in reps:
            s.note_view_id(vid)
        candidates = set(reps.values()) | set(reported) | set(s.view.members)
        asked = sorted(
            m for m in candidates if m != s.local and (m in reps.values() or m in reported or s.alive(m, now))
        )
        s.merge_counter += 1
        merge_id = s.merge_id_base | (s.merge_counter & 0xFFFFFFFF)
        rnd = MergeRound(merge_id, asked, now + s.props.merge_timeout)
        rnd.unheard_deadline = now + s.props.merge_timeout / 2  # the participants' locks last merge_timeout
        rnd.answers[s.local] = (s.view, s.digest())
        s.merge = rnd
        s.c["merges_started"] += 1
        for m in asked:
            out.send(m, MERGE_REQ(merge_id))
        s.c["merge_reqs_sent"] += len(asked)
        reps_named = sorted({name_of(r) for r in reps.values() if r != s.local})
        out.event("merge_start", merge_id=merge_id, reps=reps_named)

    def handle_req(self, src: str, merge_id: int, now: float, out: Effects) -> None:
        """Answers with our view and digest, and takes part in no other merge until the merge view arrives or
        merge_timeout passes (a coordinator starts no view change for joins and leaves meanwhile; a busy member
        rejects). Until then the stack holds back our multicasts (`holds_multicasts`), so the digest we answered
        stays true; a regular view, or our own takeover from suspected coordinators, installed meanwhile keeps the
        hold."""
        s = self.s
        s.c["merge_reqs_received"] += 1
        lock = s.lock
        same = lock is not None and lock[1] == src  # the leader we answered (a retry replaces its abandoned merge)
        if s.state is not State.MEMBER or s.view is None or (not same and s.busy()):
            reject = View(ViewId(s.local, REJECT_VIEW_ID_COUNTER), (s.local,))
            out.send(src, MERGE_RSP(merge_id, reject, {}))
            s.c["merge_rejects_sent"] += 1
            return
        s.lock = (merge_id, src, now + s.props.merge_timeout)
        out.send(src, MERGE_RSP(merge_id, s.view, s.digest()))
        s.c["merge_rsps_sent"] += 1

    def handle_rsp(self, src: str, merge_id: int, view: View, digest: Digest, now: float, out: Effects) -> None:
        s = self.s
        s.c["merge_rsps_received"] += 1
        rnd = s.merge
        if rnd is None or rnd.merge_id != merge_id or src not in rnd.asked:
            return
        if view.view_id.id == REJECT_VIEW_ID_COUNTER:
            s.c["merge_rejects_received"] += 1
            rnd.rejected.add(src)
        else:
            s.note_view_id(view.view_id)
            rnd.answers[src] = (view, digest)
            # members of its view we did not know of (no INFO from them yet): ask them too; those the failure detector
            # has not heard from are not waited for past unheard_deadline
            more = [
                m
                for m in (view.members if s.props.merge_ask_listed_members else ())
                if m != s.local and m not in rnd.asked and m not in s.departed
            ]
            for m in more:
                rnd.asked.append(m)
                if not s.alive(m, now):
                    rnd.unheard.add(m)
                    s.c["merge_unheard_asked"] += 1
                out.send(m, MERGE_REQ(merge_id))
            s.c["merge_reqs_sent"] += len(more)
        if rnd.complete():
            self._finish(now, out)

    def _finish(self, now: float, out: Effects) -> None:
        """Every member asked answered: install the merge view of all that did not reject, grouped by the view each
        had installed, unless that is just our own view."""
        s = self.s
        rnd = s.merge
        s.merge = None
        if rnd is None or s.view is None:
            return
        answers = rnd.answers  # members that rejected (busy in another merge) are left out: a later merge takes them
        own_id = s.view.view_id
        groups: dict[ViewId, list[str]] = {own_id: []}
        for m in [s.local, *sorted(m for m in answers if m != s.local)]:
            groups.setdefault(answers[m][0].view_id, []).append(m)
        if len(groups) < 2:  # everyone has our view by now
            s.merge = rnd
            self._abandon(now, out)
            return
        members: list[str] = []
        subgroups: list[tuple[int, int]] = []
        for group in groups.values():  # our subgroup first, the others in the order we heard of them
            order = answers[group[0]][0].members
            first = len(members)
            members.extend(sorted(group, key=order.index))
            subgroups.append((first, len(members) - 1))
        members.remove(s.local)  # the leader coordinates; it stays inside its own subgroup's range
        members.insert(0, s.local)
        merged_from = tuple(groups)
        new_view = View(s.new_view_id(s.local, *(v.id for v in merged_from)), tuple(members), merged_from)
        # each member's own (purged, highest sent): receivers from other subgroups restart between the two
        merged: Digest = {m: answers[m][1].get(m, (0, 0)) for m in members}
        s.c["merges_completed"] += 1
        self.views.install(new_view, now, out, merged, tuple(subgroups))
        self.views.start(new_view, now, out, merge=(merged, tuple(subgroups)))

    def _abandon(self, now: float, out: Effects) -> None:
        s = self.s
        rnd = s.merge
        if rnd is not None:
            s.c["merges_abandoned"] += 1
            out.event("merge_abandoned", merge_id=rnd.merge_id)
        s.cancel_merge(out)
        self.views.process_requests(now, out)

    def handle_cancel(self, src: str, merge_id: int, now: float, out: Effects) -> None:
        s = self.s
        s.c["merge_cancels_received"] += 1
        lock = s.lock
        if lock is not None and lock[0] == merge_id and lock[1] == src:
            s.lock = None
            self.views.process_requests(now, out)

    def tick(self, now: float, out: Effects) -> None:
        """The round's deadlines (the unheard members', then its own) and the participant's lock."""
        s = self.s
        merge = s.merge
        if merge is not None and merge.unheard and now >= merge.unheard_deadline:
            s.c["merge_unheard_left_out"] += merge.drop_silent_unheard()  # dead, or cut off
            if merge.complete():
                self._finish(now, out)
        if s.merge is not None and now >= s.merge.deadline:
            self._abandon(now, out)  # digests collected this long ago are stale: try again later
        if s.lock is not None and now >= s.lock[2]:
            s.lock = None
            s.c["merge_lock_timeouts"] += 1
            self.views.process_requests(now, out)
