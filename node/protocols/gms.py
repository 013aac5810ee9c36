"""GMS: group membership — discovery, join, leave, exclusion of suspects, view installation and the merge handshake.

Views list their members oldest first; members[0] coordinates and is the creator of the view id (a view id's
counter is above every counter this member has seen, so a new view's id is greater than all it knows). GMS sends
its own messages directly, with acks, retries and timeouts, and never relies on the reliable unicast or multicast
layers: membership stays alive under any chaos.

Gms is the layer; its work is done by three components it owns, over one shared `GmsState` (gms_state.py):
`ViewChanges` (gms_views.py: installing views, the coordinator's view changes), `JoinLeave` (gms_join.py) and
`MergeHandshake` (gms_merge.py). Gms routes messages, timers and suspicions to them.

Join and leave (node/protocols/gms_join.py): a new member multicasts FIND, collects FIND_RSP(view_id) and the FINDs of
other joiners for `discovery_timeout`, and sends JOIN_REQ to the coordinator of the highest view id found. With no
coordinator anywhere, the smallest address among the joiners becomes a singleton coordinator and tells the others,
which join it.

View change (coordinator, node/protocols/gms_views.py): requests (joins, leaves, suspicions from FD) are queued and
bundled into one new view. The coordinator installs it, sends VIEW(view, its multicast digest, ()) to every other old
member and resends it every `view_xmit_interval` until acked or `view_ack_collection_timeout` passes; then it answers
the joiners with JOIN_RSP(view, digest) and the leavers with LEAVE_RSP. A leaving coordinator installs the view
without itself at the others (the next member coordinates). If the coordinator is suspected, the first member that
suspects every member before it takes over. A member installs a VIEW only if its id is greater than its own view's
and, unless it is a merge view, its creator is a member of its own view: a takeover view made in another partition
is not a successor of ours (the merge joins the two properly).

Merging: node/protocols/gms_merge.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from node.protocols.base import NEVER, BuildContext, Effects, MembershipLayer, MulticastLayer, Properties, StackRoutes
from node.protocols.gms_join import JoinLeave
from node.protocols.gms_merge import MergeHandshake
from node.protocols.gms_state import GmsProps, GmsState, State
from node.protocols.gms_views import ViewChanges
from node.wire import Message, View, ViewId
from node.wire_headers import GMS_CANCEL_MERGE as CANCEL_MERGE
from node.wire_headers import GMS_FIND as FIND
from node.wire_headers import GMS_FIND_RSP as FIND_RSP
from node.wire_headers import GMS_JOIN_REQ as JOIN_REQ
from node.wire_headers import GMS_JOIN_RSP as JOIN_RSP
from node.wire_headers import GMS_LEAVE_REQ as LEAVE_REQ
from node.wire_headers import GMS_LEAVE_RSP as LEAVE_RSP
from node.wire_headers import GMS_MERGE_REQ as MERGE_REQ
from node.wire_headers import GMS_MERGE_RSP as MERGE_RSP
from node.wire_headers import GMS_VIEW as VIEW
from node.wire_headers import GMS_VIEW_ACK as VIEW_ACK

__all__ = [
    "CANCEL_MERGE",
    "FIND",
    "FIND_RSP",
    "JOIN_REQ",
    "JOIN_RSP",
    "LEAVE_REQ",
    "LEAVE_RSP",
    "MERGE_REQ",
    "MERGE_RSP",
    "VIEW",
    "VIEW_ACK",
    "AloneRoutes",
    "Gms",
    "GmsProps",
    "State",
]


_NOT_JOINED = (State.INIT, State.DISCOVERY, State.JOINING)


class AloneRoutes:
    """The routes of a GMS outside a stack (its unit tests): views go to its multicast layer alone, and every
    member counts as alive."""

    def __init__(self, multicast: MulticastLayer[Properties] | None) -> None:
        self.multicast = multicast

    def install_view(self, view: View, now: float, out: Effects) -> None:
        if self.multicast is not None:
            self.multicast.install_view(view, now, out)

    def alive(self, member: str, now: float) -> bool:
        return True

    def member_left(self) -> None:
        if self.multicast is not None:
            self.multicast.close()


class Gms(MembershipLayer[GmsProps]):
    """The GMS layer of one member. It drives the multicast layer below it (digests, window resets); views reach the
    other layers, and liveness comes from FD, through the stack's routes. Its state is `s` (GmsState), shared with
    the components that do the work: `views`, `joining` and `merging`."""

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
        "view_acks_waived",
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
        "merge_departed_skipped",  # members that left through us, reported by a stale INFO: not asked into a merge
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
        multicast: MulticastLayer[Properties] | None = None,
        routes: StackRoutes | None = None,
    ) -> None:
        super().__init__(local, props)
        routes = routes if routes is not None else AloneRoutes(multicast)
        self.s = GmsState(local, self.props, self.c, multicast, routes)
        self.views = ViewChanges(self.s)
        self.joining = JoinLeave(self.s, self.views)
        self.merging = MergeHandshake(self.s, self.views)

    @classmethod
    def create(cls, local: str, props: Mapping[str, object], ctx: BuildContext) -> Gms:
        return cls(local, cls.make_props(props), multicast=ctx.multicast, routes=ctx.routes)

    # --- queries --------------------------------------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self.s.state

    @property
    def view(self) -> View | None:
        return self.s.view

    @property
    def is_coord(self) -> bool:
        return self.s.is_coord

    @property
    def coordinator(self) -> str | None:
        return self.s.coordinator

    @property
    def has_left(self) -> bool:
        return self.s.state is State.LEFT

    @property
    def holds_multicasts(self) -> bool:
        """True until this member has joined, and during a merge handshake we lead or answered: new multicasts wait
        (in the stack) until then.

        Before joining (discovery, a JOIN_REQ whose JOIN_RSP has not come) nothing goes out, as a JGroups channel
        cannot send before connect() returns. Otherwise the coordinator, which lists a joiner before its JOIN_RSP,
        could deliver what we sent, exclude us (our JOIN_RSP lost, no heartbeats from us yet), take us in again with
        a fresh window at 0 and deliver those seqnos a second time (scenarios/regressions/gms-multicast-before-join
        .toml, found by explore).
        During a merge handshake others restart our window at the seqno our answer gave; a message sent after it and
        purged before the merge view (our old view's members acked it) would be waited for forever (a light form of
        JGroups' FLUSH)."""
        s = self.s
        return s.state in _NOT_JOINED or s.merge is not None or s.lock is not None

    def note_view_id(self, view_id: ViewId) -> None:
        """A view id heard anywhere (INFO, FIND_RSP): later views get higher counters."""
        self.s.note_view_id(view_id)

    # --- what the other layers ask of GMS -------------------------------------------------------------------------

    def leave(self, now: float, out: Effects) -> None:
        self.joining.leave(now, out)

    def start_merge(self, reps: dict[ViewId, str], reported: dict[str, ViewId], now: float, out: Effects) -> None:
        self.merging.start(reps, reported, now, out)

    def suspect(self, member: str, now: float, out: Effects) -> None:
        self.suspect_all([member], now, out)

    def suspect_all(self, members: list[str], now: float, out: Effects) -> None:
        s = self.s
        view = s.view
        if view is None or s.state is not State.MEMBER:
            return
        members = [m for m in members if m != s.local and m in view.members]
        if not members:
            return
        s.suspected.update(members)
        s.c["suspicions"] += len(members)
        if s.is_coord:
            self.views.waive_acks(members, now, out)
            self.views.process_requests(now, out)
        else:
            self._maybe_take_over(now, out)

    def unsuspect(self, member: str, now: float, out: Effects) -> None:
        self.s.suspected.discard(member)

    def _maybe_take_over(self, now: float, out: Effects) -> None:
        """If every member before this one is suspected, this member coordinates: a new view without them."""
        s = self.s
        view = s.view
        assert view is not None
        before = view.members[: view.members.index(s.local)]
        if not before or any(m not in s.suspected for m in before):
            return
        s.c["takeovers"] += 1
        # A merge we answered stays answered: its leader installs the merge view with the digest we gave, so our
        # multicasts stay held until then (or merge_timeout), as through a regular view change (`handle_view`).
        s.cancel_merge(out)
        new_members = [m for m in view.members if m not in s.suspected]
        s.c["exclusions"] += len(view.members) - len(new_members)
        new_view = View(s.new_view_id(s.local), tuple(new_members))
        self.views.install(new_view, now, out)
        self.views.start(new_view, now, out)

    # --- network side ---------------------------------------------------------------------------------------------

    def handle(self, src: str, msgs: list[Message], now: float, out: Effects) -> None:
        s = self.s
        if src == s.local or s.state is State.LEFT:
            return
        for m in msgs:
            if isinstance(m, FIND):
                self.joining.handle_find(src, out)
            elif isinstance(m, FIND_RSP):
                self.joining.handle_find_rsp(src, m.view_id, now, out)
            elif isinstance(m, JOIN_REQ):
                s.c["join_reqs_received"] += 1
                if s.is_coord:  # anyone else: the joiner finds the coordinator again and retries
                    s.joins.append(src)
                    self.views.process_requests(now, out)
            elif isinstance(m, JOIN_RSP):
                self.joining.handle_join_rsp(m.view, m.digest, now, out)
            elif isinstance(m, VIEW):
                self.views.handle_view(src, m.view, m.digest, m.subgroups, now, out)
            elif isinstance(m, VIEW_ACK):
                self.views.handle_view_ack(src, m.view_id, now, out)
            elif isinstance(m, LEAVE_REQ):
                s.c["leave_reqs_received"] += 1
                if s.is_coord:  # anyone else: the leaver resends to the coordinator of its view
                    s.leaves.append(src)
                    self.views.process_requests(now, out)
            elif isinstance(m, LEAVE_RSP):
                s.c["leave_rsps_received"] += 1
                if s.state is State.LEAVING:
                    self.views.left(out)
            elif isinstance(m, MERGE_REQ):
                self.merging.handle_req(src, m.merge_id, now, out)
            elif isinstance(m, MERGE_RSP):
                self.merging.handle_rsp(src, m.merge_id, m.view, m.digest, now, out)
            elif isinstance(m, CANCEL_MERGE):
                self.merging.handle_cancel(src, m.merge_id, now, out)

    # --- timers ---------------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float:
        s = self.s
        if s.state is State.INIT:
            return -NEVER
        t = s.deadline
        if s.state is State.LEAVING:
            t = min(t, s.leave_xmit)
        if s.pending is not None:
            t = min(t, s.pending.next_xmit, s.pending.deadline)
        if s.merge is not None:
            t = min(t, s.merge.deadline, s.merge.unheard_deadline if s.merge.unheard else NEVER)
        if s.lock is not None:
            t = min(t, s.lock[2])
        return t

    def tick(self, now: float, out: Effects) -> None:
        s = self.s
        state = s.state
        if state is State.INIT:
            s.attempts = 0
            self.joining.start_discovery(now, out)
            return
        if state in (State.DISCOVERY, State.JOINING):
            self.joining.tick_joining(now, out)
        elif state is State.LEAVING and self.joining.tick_leaving(now, out):
            return
        self.views.tick(now, out)
        self.merging.tick(now, out)

    # --- introspection --------------------------------------------------------------------------------------------

    def gauges(self) -> dict[str, int]:
        view = self.s.view
        return {
            "members": len(view.members) if view is not None else 0,
            "view_counter": view.view_id.id if view is not None else 0,
            "is_coord": int(self.s.is_coord),
            "suspected": len(self.s.suspected),
        }

    def is_idle(self) -> bool:
        """No discovery, join, leave, view change or merge under way."""
        return self.s.state in (State.MEMBER, State.LEFT) and not self.s.busy()
