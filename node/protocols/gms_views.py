"""GMS's view changes (a component of node/protocols/gms.py's Gms, over its GmsState): installing a view, the
coordinator's acked view changes that bundle the queued joins, leaves and suspicions, a member's handling of a VIEW,
and the end of a member's membership.

View change (coordinator): requests (joins, leaves, suspicions from FD) are queued and bundled into one new view.
The coordinator installs it, sends VIEW(view, its multicast digest, ()) to every other old member and resends it
every `view_xmit_interval` until acked or `view_ack_collection_timeout` passes; then it answers the joiners with
JOIN_RSP(view, digest) and the leavers with LEAVE_RSP. A member installs a VIEW only if its id is greater than its
own view's and, unless it is a merge view, its creator is a member of its own view: a takeover view made in another
partition is not a successor of ours (the merge joins the two properly).

Multicast windows: a member restarts (reset_windows) the multicast windows of the senders that came from another
subgroup than itself or were not in its previous view, at the seqnos the VIEW's digest gives (never below what it
delivered of them before): nothing is delivered twice, nothing waited for that only another subgroup had. A merge
digest holds each member's own entry, (purged, highest sent): a sender of our previous view restarts at what it can
still resend (we kept each other in our views, so what we missed of it is owed to us; what it purged is gone), a
sender new to our view after its highest seqno (nothing it sent outside our view is owed to us).
"""

from __future__ import annotations

from node.addresses import name_of
from node.protocols.base import NEVER, Effects, MulticastLayer, Properties
from node.protocols.gms_state import GmsState, PendingView, State
from node.wire import Digest, Message, Ranges, View, ViewId
from node.wire_headers import GMS_JOIN_RSP as JOIN_RSP
from node.wire_headers import GMS_LEAVE_RSP as LEAVE_RSP
from node.wire_headers import GMS_VIEW as VIEW
from node.wire_headers import GMS_VIEW_ACK as VIEW_ACK

MAX_REMEMBERED = 1024  # former members whose highest delivered seqno, or departure, is kept (oldest forgotten first)


def _subgroup_of(view: View, subgroups: Ranges) -> dict[str, ViewId]:
    """member -> the view id of the subgroup it came from, per a merge VIEW's subgroups field."""
    group: dict[str, ViewId] = {}
    for vid, (first, last) in zip(view.merged_from, subgroups, strict=False):
        for m in view.members[first : last + 1]:
            group[m] = vid
    return group


class ViewChanges:
    """Installs views and runs the coordinator's view changes, on the GMS's shared state."""

    def __init__(self, s: GmsState) -> None:
        self.s = s

    # --- installing views -----------------------------------------------------------------------------------------

    def install(
        self, view: View, now: float, out: Effects, digest: Digest | None = None, subgroups: Ranges = ()
    ) -> None:
        """Installs a view in GMS and (through the stack's routes) in every other layer, and writes the history event.

        `digest` (from a VIEW) restarts windows in the multicast protocol (`_senders_to_reset`), once the view is
        installed everywhere.
        """
        s = self.s
        previous = s.view
        reset = self._senders_to_reset(view, digest, subgroups) if digest else []
        mc = s.multicast
        if mc is not None and previous is not None:
            self._remember_delivered(mc, [m for m in previous.members if m not in view.members])
        s.view = view
        s.note_view_id(view.view_id)
        members = set(view.members)
        s.suspected &= members
        if s.pending is not None and s.pending.view.view_id != view.view_id:
            s.pending = None  # another coordinator's view overrides ours
        s.routes.install_view(view, now, out)  # every other layer, bottom first
        if mc is not None and digest and (reset or view.is_merge):
            mc.reset_windows(self._restart_points(view, previous, digest, reset), reset, now, out)
            s.c["windows_reset"] += len(reset)
        s.c["views_installed"] += 1
        if view.is_merge:
            s.c["merge_views_installed"] += 1
        out.event(
            "view",
            view_id=str(view.view_id),
            members=[name_of(m) for m in view.members],
            merge=view.is_merge,
            addresses=list(view.members),
            merged_from=[str(v) for v in view.merged_from],
        )

    def _remember_delivered(self, mc: MulticastLayer[Properties], gone: list[str]) -> None:
        """Before the windows of members leaving our view are dropped: how far we delivered their messages. Should
        they come back (partitions that overlap or flap), their new window starts above it: never twice."""
        if not gone:
            return
        delivered = self.s.delivered
        d = mc.digest()
        for m in gone:
            if m in d:
                delivered[m] = max(delivered.get(m, 0), d[m][0])
        while len(delivered) > MAX_REMEMBERED:
            del delivered[next(iter(delivered))]

    def _restart_points(self, view: View, previous: View | None, digest: Digest, reset: list[str]) -> Digest:
        """The digest reset_windows gets: (low, highest) per restarted sender, the window restarting above low (and
        above what it delivered) and asking for what it lacks up to highest.

        A merge digest holds every member's own entry, (purged, highest sent), and goes down whole (MCAST skips
        what other senders purged). A sender of our previous view keeps its entry: the window restarts at what the
        sender can still resend. A sender new to our view gets (highest, highest): nothing it sent outside our view
        is owed to us. A coordinator's digest (a regular view) goes down only for the senders restarted, all new to
        our view, as (highest received, highest received): its entries are its receive windows, not theirs.
        Never below what we delivered of a sender before it left our view (`_remember_delivered`): never twice."""
        given = dict(digest) if view.is_merge else {}
        before = set(previous.members) if previous is not None else set()
        for m in reset:
            low, highest = digest[m]
            if not view.is_merge or m not in before:
                low = highest
            floor = self.s.delivered.get(m, 0)
            given[m] = (max(low, floor), max(highest, floor))
        return given

    def _senders_to_reset(self, view: View, digest: Digest, subgroups: Ranges) -> list[str]:
        """The senders whose multicast windows restart at the digest's offsets when `view` replaces ours.

        Those not in our previous view: we dropped their windows or never had one (a fresh window at 0 would wait
        for messages long purged, or deliver again what we delivered before). In a merge view also those that came
        from another subgroup than we did (each told the merge leader which view it had): they purged what only
        their subgroup had (the asymmetric case: they were in our view, we were not in theirs)."""
        s = self.s
        previous = s.view
        members = set(view.members)
        candidates = [m for m in digest if m != s.local and m in members]
        if previous is None:
            return candidates
        before = set(previous.members)
        if not view.is_merge or not s.props.reset_subgroup_windows:  # flawed variant: JGRP-940
            return [m for m in candidates if m not in before]
        group = _subgroup_of(view, subgroups)
        ours = group.get(s.local)
        return [m for m in candidates if m not in before or group.get(m) != ours]

    # --- the coordinator's view changes ---------------------------------------------------------------------------

    def _send_view(
        self, view: View, recipients: list[str], merge: tuple[Digest, Ranges] | None, out: Effects
    ) -> dict[str, Message]:
        """VIEW to each recipient: with the merged digest and subgroups in a merge, else the coordinator's digest."""
        msg = VIEW(view, *merge) if merge is not None else VIEW(view, self.s.digest(), ())
        for r in recipients:
            out.send(r, msg)
        self.s.c["views_sent"] += len(recipients)
        return dict.fromkeys(recipients, msg)

    def start(
        self,
        view: View,
        now: float,
        out: Effects,
        *,
        joiners: list[str] | None = None,
        leavers: list[str] | None = None,
        merge: tuple[Digest, Ranges] | None = None,
        leaving_self: bool = False,
    ) -> None:
        """Coordinator: sends the view to the other members of it (joiners get JOIN_RSP later) and collects acks."""
        s = self.s
        joiners = joiners or []
        recipients = [m for m in view.members if m != s.local and m not in joiners]
        unacked = self._send_view(view, recipients, merge, out)
        s.pending = PendingView(
            view,
            unacked,
            now + s.props.view_ack_collection_timeout,
            s.next_xmit(now),
            joiners,
            leavers or [],
            leaving_self,
        )
        if not unacked:
            self._finish(now, out)

    def _finish(self, now: float, out: Effects) -> None:
        s = self.s
        pending = s.pending
        if pending is None:
            return
        s.pending = None
        if pending.unacked:
            s.c["view_ack_timeouts"] += 1
        if pending.leaving_self:
            self.left(out)
            return
        view = s.view
        if view is not None and view.view_id == pending.view.view_id:
            digest = s.digest()
            for j in pending.joiners:
                out.send(j, JOIN_RSP(view, digest))
                s.c["join_rsps_sent"] += 1
        for leaver in pending.leavers:
            out.send(leaver, LEAVE_RSP())
            s.c["leave_rsps_sent"] += 1
        self.process_requests(now, out)

    def process_requests(self, now: float, out: Effects) -> None:
        """Coordinator: one new view for every queued join, leave and suspicion (JGroups' view bundling)."""
        s = self.s
        if not s.is_coord or s.busy():
            return
        view = s.view
        assert view is not None
        members = list(view.members)
        digest: Digest | None = None
        joiners: list[str] = []
        for j in s.joins:
            if j in members:  # a retry after a lost JOIN_RSP: answer again at once
                digest = digest if digest is not None else s.digest()
                out.send(j, JOIN_RSP(view, digest))
                s.c["join_rsps_sent"] += 1
            elif j not in joiners:
                joiners.append(j)
        s.joins.clear()
        leavers = [m for m in s.leaves if m in members and m != s.local]
        for m in s.leaves:
            if m not in members:
                out.send(m, LEAVE_RSP())
                s.c["leave_rsps_sent"] += 1
        s.leaves.clear()
        s.note_departed(leavers, MAX_REMEMBERED)
        joining_names = {name_of(j) for j in joiners}
        replaced = [m for m in members if m != s.local and name_of(m) in joining_names]  # older incarnations
        excluded = [m for m in members if m in s.suspected and m != s.local]
        gone = set(leavers) | set(excluded) | set(replaced)
        if not joiners and not gone:
            return
        s.c["exclusions"] += len(set(excluded) | set(replaced))
        new_members = [m for m in members if m not in gone] + joiners
        new_view = View(s.new_view_id(s.local), tuple(new_members))
        self.install(new_view, now, out)
        self.start(new_view, now, out, joiners=joiners, leavers=leavers)

    def tick(self, now: float, out: Effects) -> None:
        """The pending view change's resends and its ack deadline."""
        pending = self.s.pending
        if pending is None:
            return
        if now >= pending.deadline:
            self._finish(now, out)
        elif now >= pending.next_xmit:
            pending.next_xmit = self.s.next_xmit(now)
            for member, msg in pending.unacked.items():
                out.send(member, msg)
            self.s.c["view_xmits"] += len(pending.unacked)

    def handle_view_ack(self, src: str, view_id: ViewId, now: float, out: Effects) -> None:
        self.s.c["view_acks_received"] += 1
        pending = self.s.pending
        if pending is None or pending.view.view_id != view_id:
            return
        pending.unacked.pop(src, None)
        if not pending.unacked:
            self._finish(now, out)

    def waive_acks(self, members: list[str], now: float, out: Effects) -> None:
        """Suspected members: the pending view change stops waiting for their VIEW_ACKs (JGroups' AckCollector
        .suspect), so the view that excludes them follows at once instead of after view_ack_collection_timeout."""
        pending = self.s.pending
        if pending is None or pending.leaving_self:
            return
        waived = [m for m in members if pending.unacked.pop(m, None) is not None]
        self.s.c["view_acks_waived"] += len(waived)
        if waived and not pending.unacked:
            self._finish(now, out)

    # --- a member's side ------------------------------------------------------------------------------------------

    def handle_view(self, src: str, view: View, digest: Digest, subgroups: Ranges, now: float, out: Effects) -> None:
        s = self.s
        if s.state not in (State.MEMBER, State.LEAVING):
            s.c["views_ignored_not_joined"] += 1  # a joiner waits for its JOIN_RSP (it carries the digest)
            return
        out.send(src, VIEW_ACK(view.view_id))
        s.c["view_acks_sent"] += 1
        if s.local not in view.members:
            s.c["views_not_member"] += 1
            return
        current = s.view
        if current is not None and view.view_id.key() <= current.view_id.key():
            s.c["stale_views_dropped"] += current.view_id != view.view_id
            return
        if current is not None and not view.is_merge and view.view_id.creator not in current.members:
            # not a successor of our view: made by a coordinator of another partition (a takeover that listed us
            # while we could not hear it). Installing it would pair us with members whose messages we missed; the
            # next merge joins the two views properly.
            s.c["foreign_views_dropped"] += 1
            return
        if view.is_merge:
            s.lock = None  # the merge we answered is over (its view), or another merge took us in
        # A regular view from our coordinator does not end a merge we answered: its leader still installs the merge
        # view with the digest we gave, so our multicasts stay held until then (or merge_timeout). Sending them in
        # this view would let its members (without the leader's) acknowledge and purge what the leader's side then
        # waits for forever (tests/sim/test_membership.py, a view change between MERGE_RSP and the merge view).
        s.cancel_merge(out)
        self.install(view, now, out, digest, subgroups)
        self.process_requests(now, out)

    def left(self, out: Effects) -> None:
        """The member is out of the group (its leave is done, or gave up): no view change, merge or timer is left,
        and the other layers stop."""
        s = self.s
        s.state = State.LEFT
        s.deadline = NEVER
        s.leave_xmit = NEVER
        s.pending = None
        s.cancel_merge(out)
        s.lock = None
        s.routes.member_left()
        out.event("left")
