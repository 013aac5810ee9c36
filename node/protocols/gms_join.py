"""GMS's discovery, join and graceful leave: a member's own way into the group and out (a component of
node/protocols/gms.py's Gms, over its GmsState; the view changes it starts are gms_views.py's).

A new member multicasts FIND and collects answers for `discovery_timeout` (or until the first answer from a
coordinator, `break_on_coord_rsp`): members answer FIND_RSP with their view id, members still joining with id 0.
A FIND heard while discovering counts as such an answer too, from a joiner (JGroups' Discovery adds the requester
of a discovery to its own responses): two joiners starting a little apart know of each other even when only one
of them heard the other's FIND.

At the end of discovery the member sends JOIN_REQ to the coordinator of the highest view id found and waits
`join_timeout` for JOIN_RSP(view, digest), retrying discovery up to `max_join_attempts` times. With no coordinator
anywhere, the smallest address among the joiners becomes a singleton coordinator, and tells the joiners it heard
of with an unasked FIND_RSP of its view, so that they join it at once instead of at the end of their next
discovery; the others ask again (JGroups' ClientGmsImpl, which retries until the smallest coordinates).

Leave: a member sends LEAVE_REQ to its coordinator, resent every `view_xmit_interval` until LEAVE_RSP or
`leave_timeout`; a leaving coordinator hands over by installing the view without itself at the others.
"""

from __future__ import annotations

from node.protocols.base import NEVER, Effects
from node.protocols.gms_state import GmsState, State
from node.protocols.gms_views import ViewChanges
from node.wire import Digest, View, ViewId
from node.wire_headers import GMS_FIND as FIND
from node.wire_headers import GMS_FIND_RSP as FIND_RSP
from node.wire_headers import GMS_JOIN_REQ as JOIN_REQ
from node.wire_headers import GMS_LEAVE_REQ as LEAVE_REQ


class JoinLeave:
    """How a member gets into the group and out of it."""

    def __init__(self, s: GmsState, views: ViewChanges) -> None:
        self.s = s
        self.views = views

    def start_discovery(self, now: float, out: Effects) -> None:
        s = self.s
        s.state = State.DISCOVERY
        s.responses = {}
        s.deadline = now + s.props.discovery_timeout
        s.attempts += 1
        s.c["join_attempts"] += 1
        out.send(None, FIND())
        s.c["finds_sent"] += 1

    def handle_find(self, src: str, out: Effects) -> None:
        """Answers with our view id (0 while joining). A joiner also notes the finder as a joiner: if it is the
        smaller one, we wait for it to coordinate rather than become a singleton ourselves."""
        s = self.s
        s.c["finds_received"] += 1
        if s.state is State.INIT:
            return
        if s.state is State.DISCOVERY:
            s.responses.setdefault(src, ViewId(src, 0))  # an answer it gives us later overrides this
        joined = s.state in (State.MEMBER, State.LEAVING) and s.view is not None
        view_id = s.view.view_id if joined and s.view is not None else ViewId(s.local, 0)
        out.send(src, FIND_RSP(view_id))
        s.c["find_rsps_sent"] += 1

    def handle_find_rsp(self, src: str, view_id: ViewId, now: float, out: Effects) -> None:
        s = self.s
        s.c["find_rsps_received"] += 1
        s.note_view_id(view_id)
        if s.state is not State.DISCOVERY:
            return
        s.responses[src] = view_id
        if s.props.break_on_coord_rsp and view_id.id > 0 and view_id.creator == src:
            self._discovery_done(now, out)

    def _discovery_done(self, now: float, out: Effects) -> None:
        s = self.s
        found = [vid for vid in s.responses.values() if vid.id > 0]
        if found:
            target = max(found, key=ViewId.key).creator
            s.state = State.JOINING
            s.deadline = now + s.props.join_timeout
            out.send(target, JOIN_REQ())
            s.c["join_reqs_sent"] += 1
            return
        joiners = sorted(m for m, vid in s.responses.items() if vid.id == 0 and m != s.local)
        if not joiners or s.local < joiners[0]:
            self._become_singleton(now, out)
            for j in joiners:  # they wait for the smallest joiner: tell them it coordinates now
                out.send(j, FIND_RSP(s.view.view_id if s.view is not None else ViewId(s.local, 0)))
            s.c["find_rsps_sent"] += len(joiners)
        elif self._gave_up():
            self._become_singleton(now, out)
        else:
            self.start_discovery(now, out)  # the smallest joiner becomes coordinator: ask again

    def _gave_up(self) -> bool:
        limit = self.s.props.max_join_attempts
        return limit > 0 and self.s.attempts >= limit

    def _become_singleton(self, now: float, out: Effects) -> None:
        s = self.s
        s.c["singletons"] += 1
        self._become_member(View(s.new_view_id(s.local), (s.local,)), {}, now, out)

    def handle_join_rsp(self, view: View, digest: Digest, now: float, out: Effects) -> None:
        s = self.s
        s.c["join_rsps_received"] += 1
        if s.state not in (State.DISCOVERY, State.JOINING) or s.local not in view.members:
            return
        self._become_member(view, digest, now, out)

    def _become_member(self, view: View, digest: Digest, now: float, out: Effects) -> None:
        """Joined (or became a singleton): install the view, take the digest, start accepting multicasts."""
        s = self.s
        s.state = State.MEMBER
        s.deadline = NEVER
        self.views.install(view, now, out)
        mc = s.multicast
        if mc is not None:
            if digest:
                mc.set_digest(digest, now, out)
            mc.become_server(now, out)
        self.views.process_requests(now, out)

    def tick_joining(self, now: float, out: Effects) -> None:
        """The discovery or join deadline of a joiner."""
        s = self.s
        if now < s.deadline:
            return
        if s.state is State.DISCOVERY:
            self._discovery_done(now, out)
        elif s.state is State.JOINING:
            s.c["join_timeouts"] += 1
            if self._gave_up():
                self._become_singleton(now, out)
            else:
                self.start_discovery(now, out)

    # --- leaving --------------------------------------------------------------------------------------------------

    def leave(self, now: float, out: Effects) -> None:
        """Graceful leave: LEAVE_REQ to the coordinator (resent until LEAVE_RSP or leave_timeout); a coordinator
        hands over by installing the view without itself at the others."""
        s = self.s
        if s.state in (State.LEAVING, State.LEFT):
            return
        if s.state is not State.MEMBER or s.view is None:
            self.views.left(out)
            return
        others = [m for m in s.view.members if m != s.local]
        if not others:
            self.views.left(out)
            return
        if s.is_coord:
            s.cancel_merge(out)
            s.lock = None
            s.pending = None
            new_view = View(s.new_view_id(others[0]), tuple(others))
            s.state = State.LEAVING
            s.deadline = NEVER
            self.views.start(new_view, now, out, leaving_self=True)
            return
        s.state = State.LEAVING
        s.deadline = now + s.props.leave_timeout
        self._send_leave_req(now, out)

    def _send_leave_req(self, now: float, out: Effects) -> None:
        s = self.s
        coord = s.coordinator
        if coord is not None and coord != s.local:
            out.send(coord, LEAVE_REQ())
            s.c["leave_reqs_sent"] += 1
        s.leave_xmit = s.next_xmit(now)

    def tick_leaving(self, now: float, out: Effects) -> bool:
        """The leave deadline and LEAVE_REQ resends of a leaving member; True once it has left."""
        s = self.s
        if s.deadline == NEVER:  # a leaving coordinator: its view change decides
            return False
        if now >= s.deadline:
            s.c["leave_timeouts"] += 1
            self.views.left(out)
            return True
        if now >= s.leave_xmit:
            self._send_leave_req(now, out)
        return False
