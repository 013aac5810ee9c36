"""GMS: group membership — discovery, join, leave, exclusion of suspects, view installation and the merge handshake.

Views list their members oldest first; members[0] coordinates and is the creator of the view id (a view id's
counter is above every counter this member has seen, so a new view's id is greater than all it knows). GMS sends
its own messages directly, with acks, retries and timeouts, and never relies on the reliable unicast or multicast
layers: membership stays alive under any chaos.

Join and leave (node/protocols/gms_join.py): a new member multicasts FIND, collects FIND_RSP(view_id) and the FINDs of
other joiners for `discovery_timeout`, and sends JOIN_REQ to the coordinator of the highest view id found. With no
coordinator anywhere, the smallest address among the joiners becomes a singleton coordinator and tells the others,
which join it.

View change (coordinator): requests (joins, leaves, suspicions from FD) are queued and bundled into one new view.
The coordinator installs it, sends VIEW(view, its multicast digest, ()) to every other old member and resends it
every `view_xmit_interval` until acked or `view_ack_collection_timeout` passes; then it answers the joiners with
JOIN_RSP(view, digest) and the leavers with LEAVE_RSP. A leaving coordinator installs the view without itself at
the others (the next member coordinates). If the coordinator is suspected, the first member that suspects every
member before it takes over. A member installs a VIEW only if its id is greater than its own view's and, unless
it is a merge view, its creator is a member of its own view: a takeover view made in another partition is not a
successor of ours (the merge joins the two properly).

Merging: node/protocols/gms_merge.py.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from node.protocols.base import (
    NEVER,
    SECONDS,
    BuildContext,
    Effects,
    MembershipLayer,
    MulticastLayer,
    Properties,
    StackRoutes,
    prop,
)
from node.protocols.gms_join import FIND, FIND_RSP, JOIN_REQ, JOIN_RSP, LEAVE_REQ, LEAVE_RSP, JoinLeave
from node.protocols.gms_merge import CANCEL_MERGE, MERGE_REQ, MERGE_RSP, MergeHandshake, MergeRound, Ranges, State
from node.wire import Digest, Message, View, ViewId, header_class, name_of

VIEW = header_class("GMS", "VIEW")
VIEW_ACK = header_class("GMS", "VIEW_ACK")


@dataclass
class GmsProps(Properties):
    """Properties with JGroups' GMS (and Discovery) names and defaults; durations in seconds."""

    join_timeout: float = prop(2.0, "wait for JOIN_RSP after a JOIN_REQ", SECONDS)
    discovery_timeout: float = prop(
        2.0, "collect FIND_RSPs (JGroups uses join_timeout; PING's `timeout` in 3.x)", SECONDS
    )
    break_on_coord_rsp: bool = prop(True, "stop discovery at the first answer from a coordinator (Discovery)")
    max_join_attempts: int = prop(10, "discovery + join rounds before becoming a singleton; 0 = never give up")
    view_ack_collection_timeout: float = prop(2.0, "wait for VIEW_ACKs before the next view change", SECONDS)
    view_xmit_interval: float = prop(
        0.5,
        "resend VIEW (and LEAVE_REQ) this often while unacked (not in JGroups, whose VIEW rides on NAKACK2); 0 = send "
        "once only: a lost VIEW is never repaired (scenarios/bugs/gms-leave-view-lost.toml)",
        SECONDS,
    )
    leave_timeout: float = prop(2.0, "a leaving member waits this long for LEAVE_RSP, then leaves anyway", SECONDS)
    merge_timeout: float = prop(5.0, "wait for MERGE_RSPs (leader); how long a participant stays locked", SECONDS)
    reset_subgroup_windows: bool = prop(
        True,
        "a merge view restarts the multicast windows of the members that came from another subgroup, even those in our"
        " previous view (JGRP-940: they purged what only their subgroup had); False = only of members new to our view "
        "(the flawed variant: scenarios/bugs/merge-overlapping.toml)",
    )
    merge_ask_listed_members: bool = prop(
        True,
        "the merge leader also asks the members listed in the views it is answered with that it had not heard of (a "
        "coordinator whose INFO it missed, JGRP-1876), and waits up to merge_timeout / 2 for those the failure detector"
        " has not heard from (right after a heal the first INFO may come before their first heartbeat); False = only "
        "the members it knew of when the merge started (the flawed variant: scenarios/bugs/merge-coordinator-left-out"
        ".toml)",
    )

    def validate(self) -> None:
        for name in sorted(self.durations() - {"view_xmit_interval"}):
            if getattr(self, name) <= 0:
                raise ValueError(f"gms.{name} must be > 0")
        if self.view_xmit_interval < 0:
            raise ValueError("gms.view_xmit_interval must be >= 0 (0: never resend a VIEW or LEAVE_REQ)")
        if self.max_join_attempts < 0:
            raise ValueError("gms.max_join_attempts must be >= 0 (0: never give up)")


@dataclass
class PendingView:
    """A view change the coordinator is collecting acks for (it is installed locally already, unless leaving)."""

    view: View
    unacked: dict[str, Message]  # member -> the VIEW message to resend
    deadline: float
    next_xmit: float
    joiners: list[str] = field(default_factory=list)
    leavers: list[str] = field(default_factory=list)
    leaving_self: bool = False


class AloneRoutes:
    """The routes of a GMS outside a stack (its unit tests): views go to its multicast layer alone, and every
    member counts as alive."""

    def __init__(self, multicast: MulticastLayer | None) -> None:
        self.multicast = multicast

    def install_view(self, view: View, now: float, out: Effects) -> None:
        if self.multicast is not None:
            self.multicast.install_view(view, now, out)

    def alive(self, member: str, now: float) -> bool:
        return True

    def member_left(self) -> None:
        if self.multicast is not None:
            self.multicast.close()


class Gms(MergeHandshake, JoinLeave, MembershipLayer[GmsProps]):
    """The GMS state machine of one member. It drives the multicast layer below it (digests, window resets); views
    reach the other layers, and liveness comes from FD, through the stack's routes."""

    NAME = "gms"
    PROTOCOL = "GMS"
    PROPS = GmsProps
    COUNTERS = (
        "finds_sent",
        "finds_received",
        "find_rsps_sent",
        "find_rsps_received",
        "join_reqs_sent",
        "join_reqs_received",
        "join_rsps_sent",
        "join_rsps_received",
        "join_attempts",
        "join_timeouts",
        "singletons",
        "views_installed",
        "merge_views_installed",
        "views_sent",
        "view_xmits",
        "view_acks_sent",
        "view_acks_received",
        "view_ack_timeouts",
        "stale_views_dropped",
        "foreign_views_dropped",
        "views_not_member",
        "views_ignored_not_joined",
        "leave_reqs_sent",
        "leave_reqs_received",
        "leave_rsps_sent",
        "leave_rsps_received",
        "leave_timeouts",
        "suspicions",
        "exclusions",
        "takeovers",
        "windows_reset",
        "merges_started",
        "merges_completed",
        "merges_abandoned",
        "merges_busy",
        "merge_unheard_asked",  # listed in an answer, not heard from by the failure detector: asked all the same
        "merge_unheard_left_out",  # of those, the ones that had not answered by unheard_deadline
        "merge_reqs_sent",
        "merge_reqs_received",
        "merge_rsps_sent",
        "merge_rsps_received",
        "merge_rejects_sent",
        "merge_rejects_received",
        "merge_lock_timeouts",
        "merge_cancels_sent",
        "merge_cancels_received",
    )

    def __init__(
        self,
        local: str,
        props: GmsProps | None = None,
        *,
        multicast: MulticastLayer | None = None,
        routes: StackRoutes | None = None,
    ) -> None:
        super().__init__(local, props)
        self.state = State.INIT
        self.view: View | None = None
        self.max_counter = 0  # highest view id counter seen anywhere
        self.multicast = multicast  # None without one
        self.routes: StackRoutes = routes if routes is not None else AloneRoutes(multicast)
        # joining
        self._responses: dict[str, ViewId] = {}
        self._deadline = NEVER  # discovery / join / leave deadline, by state
        self._attempts = 0
        self._join_target: str | None = None
        # coordinator
        self._joins: list[str] = []
        self._leaves: list[str] = []
        self.suspected: set[str] = set()
        self._pending: PendingView | None = None
        # leaving
        self._leave_xmit = NEVER
        # merging
        self._merge: MergeRound | None = None
        self._merge_counter = 0
        self._merge_id_base = zlib.crc32(local.encode()) << 32
        self._lock: tuple[int, str, float] | None = None  # (merge_id, leader, until) as a merge participant
        self._delivered: dict[str, int] = {}  # former members -> highest of their multicasts we delivered

    @classmethod
    def create(cls, local: str, props: Mapping[str, object], ctx: BuildContext) -> Gms:
        return cls(local, cls.make_props(props), multicast=ctx.multicast, routes=ctx.routes)

    # --- queries --------------------------------------------------------------------------------------------------

    @property
    def is_coord(self) -> bool:
        return self.state is State.MEMBER and self.view is not None and self.view.coordinator == self.local

    @property
    def coordinator(self) -> str | None:
        return self.view.coordinator if self.view is not None else None

    @property
    def has_left(self) -> bool:
        return self.state is State.LEFT

    @property
    def holds_multicasts(self) -> bool:
        """True during a merge handshake we lead or answered: new multicasts wait (in the stack) until the merge
        view is installed or the merge is over. Others restart our window at the seqno our answer gave; a message
        sent after it and purged before the merge view (our old view's members acked it) would be waited for
        forever (a light form of JGroups' FLUSH)."""
        return self._merge is not None or self._lock is not None

    @property
    def is_member(self) -> bool:
        return self.state in (State.MEMBER, State.LEAVING)

    def _new_view_id(self, creator: str, *counters: int) -> ViewId:
        self.max_counter = max((self.max_counter, *counters)) + 1
        return ViewId(creator, self.max_counter)

    def note_view_id(self, view_id: ViewId) -> None:
        """A view id heard anywhere (INFO, FIND_RSP): later views get higher counters."""
        self.max_counter = max(self.max_counter, view_id.id)

    # --- installing views -----------------------------------------------------------------------------------------

    def _install(
        self, view: View, now: float, out: Effects, digest: Digest | None = None, subgroups: Ranges = ()
    ) -> None:
        """Installs a view in GMS and (through the stack's routes) in every other layer, and writes the history event.

        `digest` (from a VIEW) restarts windows in the multicast protocol (`_senders_to_reset`), once the view is
        installed everywhere.
        """
        reset = self._senders_to_reset(view, digest, subgroups) if digest else []
        mc = self.multicast
        if mc is not None and self.view is not None:
            self._remember_delivered(mc, [m for m in self.view.members if m not in view.members])
        self.view = view
        self.note_view_id(view.view_id)
        members = set(view.members)
        self.suspected &= members
        if self._pending is not None and self._pending.view.view_id != view.view_id:
            self._pending = None  # another coordinator's view overrides ours
        self.routes.install_view(view, now, out)  # every other layer, bottom first
        if mc is not None and digest and (reset or view.is_merge):
            # a merge digest holds every member's own entry and goes down whole; a coordinator's digest only for
            # the senders restarted (its entries for the others are its receive windows, not theirs)
            given = digest if view.is_merge else {m: digest[m] for m in reset}
            mc.reset_windows(self._above_delivered(given, reset), reset, now, out)
            self.c["windows_reset"] += len(reset)
        self.c["views_installed"] += 1
        if view.is_merge:
            self.c["merge_views_installed"] += 1
        out.event(
            "view",
            view_id=str(view.view_id),
            members=[name_of(m) for m in view.members],
            merge=view.is_merge,
            addresses=list(view.members),
            merged_from=[str(v) for v in view.merged_from],
        )

    def _send_view(
        self, view: View, recipients: list[str], merge: tuple[Digest, Ranges] | None, out: Effects
    ) -> dict[str, Message]:
        """VIEW to each recipient: with the merged digest and subgroups in a merge, else the coordinator's digest."""
        msg = VIEW(view, *merge) if merge is not None else VIEW(view, self._digest(), ())
        for r in recipients:
            out.send(r, msg)
        self.c["views_sent"] += len(recipients)
        return dict.fromkeys(recipients, msg)

    def _start_view_change(
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
        joiners = joiners or []
        recipients = [m for m in view.members if m != self.local and m not in joiners]
        unacked = self._send_view(view, recipients, merge, out)
        p = self.props
        self._pending = PendingView(
            view,
            unacked,
            now + p.view_ack_collection_timeout,
            self._next_xmit(now),
            joiners,
            leavers or [],
            leaving_self,
        )
        if not unacked:
            self._finish_view_change(now, out)

    def _finish_view_change(self, now: float, out: Effects) -> None:
        pending = self._pending
        if pending is None:
            return
        self._pending = None
        if pending.unacked:
            self.c["view_ack_timeouts"] += 1
        if pending.leaving_self:
            self._left(out)
            return
        view = self.view
        if view is not None and view.view_id == pending.view.view_id:
            digest = self.multicast.digest() if self.multicast is not None else {}
            for j in pending.joiners:
                out.send(j, JOIN_RSP(view, digest))
                self.c["join_rsps_sent"] += 1
        for leaver in pending.leavers:
            out.send(leaver, LEAVE_RSP())
            self.c["leave_rsps_sent"] += 1
        self._process_requests(now, out)

    # --- coordinator: bundled view changes ------------------------------------------------------------------------

    def _busy(self) -> bool:
        return self._pending is not None or self._merge is not None or self._lock is not None

    def _process_requests(self, now: float, out: Effects) -> None:
        """Coordinator: one new view for every queued join, leave and suspicion (JGroups' view bundling)."""
        if not self.is_coord or self._busy():
            return
        view = self.view
        assert view is not None
        members = list(view.members)
        digest: Digest | None = None
        joiners: list[str] = []
        for j in self._joins:
            if j in members:  # a retry after a lost JOIN_RSP: answer again at once
                digest = digest if digest is not None else (self.multicast.digest() if self.multicast else {})
                out.send(j, JOIN_RSP(view, digest))
                self.c["join_rsps_sent"] += 1
            elif j not in joiners:
                joiners.append(j)
        self._joins.clear()
        leavers = [m for m in self._leaves if m in members and m != self.local]
        for m in self._leaves:
            if m not in members:
                out.send(m, LEAVE_RSP())
                self.c["leave_rsps_sent"] += 1
        self._leaves.clear()
        joining_names = {name_of(j) for j in joiners}
        replaced = [m for m in members if m != self.local and name_of(m) in joining_names]  # older incarnations
        excluded = [m for m in members if m in self.suspected and m != self.local]
        gone = set(leavers) | set(excluded) | set(replaced)
        if not joiners and not gone:
            return
        self.c["exclusions"] += len(set(excluded) | set(replaced))
        new_members = [m for m in members if m not in gone] + joiners
        new_view = View(self._new_view_id(self.local), tuple(new_members))
        self._install(new_view, now, out)
        self._start_view_change(new_view, now, out, joiners=joiners, leavers=leavers)

    def _next_xmit(self, now: float) -> float:
        """When an unacked VIEW or LEAVE_REQ is sent again: never with view_xmit_interval = 0 (the flawed variant of
        reliable view installation: a VIEW lost on the way is lost for good, see gms-leave-view-lost.toml)."""
        interval = self.props.view_xmit_interval
        return now + interval if interval > 0 else NEVER

    # --- suspicions (from FD) -------------------------------------------------------------------------------------

    def suspect(self, member: str, now: float, out: Effects) -> None:
        view = self.view
        if view is None or member == self.local or member not in view.members or self.state is not State.MEMBER:
            return
        self.suspected.add(member)
        self.c["suspicions"] += 1
        if self.is_coord:
            self._process_requests(now, out)
        else:
            self._maybe_take_over(now, out)

    def unsuspect(self, member: str, now: float, out: Effects) -> None:
        self.suspected.discard(member)

    def _maybe_take_over(self, now: float, out: Effects) -> None:
        """If every member before this one is suspected, this member coordinates: a new view without them."""
        view = self.view
        assert view is not None
        before = view.members[: view.members.index(self.local)]
        if not before or any(m not in self.suspected for m in before):
            return
        self.c["takeovers"] += 1
        # A merge we answered stays answered: its leader installs the merge view with the digest we gave, so our
        # multicasts stay held until then (or merge_timeout), as through a regular view change (`_handle_view`).
        self._cancel_merge(out)
        new_members = [m for m in view.members if m not in self.suspected]
        self.c["exclusions"] += len(view.members) - len(new_members)
        new_view = View(self._new_view_id(self.local), tuple(new_members))
        self._install(new_view, now, out)
        self._start_view_change(new_view, now, out)

    # --- network side ---------------------------------------------------------------------------------------------

    def handle(self, src: str, msgs: list[Message], now: float, out: Effects) -> None:
        if src == self.local or self.state is State.LEFT:
            return
        for m in msgs:
            t = type(m)
            if t is FIND:
                self._handle_find(src, out)
            elif t is FIND_RSP:
                self._handle_find_rsp(src, m.view_id, now, out)
            elif t is JOIN_REQ:
                self.c["join_reqs_received"] += 1
                if self.is_coord:  # anyone else: the joiner finds the coordinator again and retries
                    self._joins.append(src)
                    self._process_requests(now, out)
            elif t is JOIN_RSP:
                self._handle_join_rsp(m.view, m.digest, now, out)
            elif t is VIEW:
                self._handle_view(src, m.view, m.digest, m.subgroups, now, out)
            elif t is VIEW_ACK:
                self._handle_view_ack(src, m.view_id, now, out)
            elif t is LEAVE_REQ:
                self.c["leave_reqs_received"] += 1
                if self.is_coord:  # anyone else: the leaver resends to the coordinator of its view
                    self._leaves.append(src)
                    self._process_requests(now, out)
            elif t is LEAVE_RSP:
                self.c["leave_rsps_received"] += 1
                if self.state is State.LEAVING:
                    self._left(out)
            elif t is MERGE_REQ:
                self._handle_merge_req(src, m.merge_id, now, out)
            elif t is MERGE_RSP:
                self._handle_merge_rsp(src, m.merge_id, m.view, m.digest, now, out)
            elif t is CANCEL_MERGE:
                self._handle_cancel_merge(src, m.merge_id, now, out)

    def _handle_view(self, src: str, view: View, digest: Digest, subgroups: Ranges, now: float, out: Effects) -> None:
        if self.state not in (State.MEMBER, State.LEAVING):
            self.c["views_ignored_not_joined"] += 1  # a joiner waits for its JOIN_RSP (it carries the digest)
            return
        out.send(src, VIEW_ACK(view.view_id))
        self.c["view_acks_sent"] += 1
        if self.local not in view.members:
            self.c["views_not_member"] += 1
            return
        current = self.view
        if current is not None and view.view_id.key() <= current.view_id.key():
            self.c["stale_views_dropped"] += current.view_id != view.view_id
            return
        if current is not None and not view.is_merge and view.view_id.creator not in current.members:
            # not a successor of our view: made by a coordinator of another partition (a takeover that listed us
            # while we could not hear it). Installing it would pair us with members whose messages we missed; the
            # next merge joins the two views properly.
            self.c["foreign_views_dropped"] += 1
            return
        if view.is_merge:
            self._lock = None  # the merge we answered is over (its view), or another merge took us in
        # A regular view from our coordinator does not end a merge we answered: its leader still installs the merge
        # view with the digest we gave, so our multicasts stay held until then (or merge_timeout). Sending them in
        # this view would let its members (without the leader's) acknowledge and purge what the leader's side then
        # waits for forever (tests/sim/test_membership.py, a view change between MERGE_RSP and the merge view).
        self._cancel_merge(out)
        self._install(view, now, out, digest, subgroups)
        self._process_requests(now, out)

    def _handle_view_ack(self, src: str, view_id: ViewId, now: float, out: Effects) -> None:
        self.c["view_acks_received"] += 1
        pending = self._pending
        if pending is None or pending.view.view_id != view_id:
            return
        pending.unacked.pop(src, None)
        if not pending.unacked:
            self._finish_view_change(now, out)

    # --- timers ---------------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float:
        if self.state is State.INIT:
            return -NEVER
        t = self._deadline
        if self.state is State.LEAVING:
            t = min(t, self._leave_xmit)
        if self._pending is not None:
            t = min(t, self._pending.next_xmit, self._pending.deadline)
        if self._merge is not None:
            t = min(t, self._merge.deadline, self._merge.unheard_deadline if self._merge.unheard else NEVER)
        if self._lock is not None:
            t = min(t, self._lock[2])
        return t

    def tick(self, now: float, out: Effects) -> None:
        state = self.state
        if state is State.INIT:
            self._attempts = 0
            self._start_discovery(now, out)
            return
        if state in (State.DISCOVERY, State.JOINING):
            self._tick_joining(now, out)
        elif state is State.LEAVING and self._tick_leaving(now, out):
            return
        self._tick_pending(now, out)
        merge = self._merge
        if merge is not None and merge.unheard and now >= merge.unheard_deadline:
            self.c["merge_unheard_left_out"] += merge.drop_silent_unheard()  # dead, or cut off
            if merge.complete():
                self._finish_merge(now, out)
        if self._merge is not None and now >= self._merge.deadline:
            self._abandon_merge(now, out)  # digests collected this long ago are stale: try again later
        if self._lock is not None and now >= self._lock[2]:
            self._lock = None
            self.c["merge_lock_timeouts"] += 1
            self._process_requests(now, out)

    def _tick_pending(self, now: float, out: Effects) -> None:
        pending = self._pending
        if pending is None:
            return
        if now >= pending.deadline:
            self._finish_view_change(now, out)
        elif now >= pending.next_xmit:
            pending.next_xmit = self._next_xmit(now)
            for member, msg in pending.unacked.items():
                out.send(member, msg)
            self.c["view_xmits"] += len(pending.unacked)

    # --- introspection --------------------------------------------------------------------------------------------

    def gauges(self) -> dict[str, int]:
        view = self.view
        return {
            "members": len(view.members) if view is not None else 0,
            "view_counter": view.view_id.id if view is not None else 0,
            "is_coord": int(self.is_coord),
            "suspected": len(self.suspected),
        }

    def is_idle(self) -> bool:
        """No discovery, join, leave, view change or merge under way."""
        return self.state in (State.MEMBER, State.LEFT) and not self._busy()
