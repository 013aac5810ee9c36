"""GMS's discovery, join and graceful leave: a member's own way into the group and out (part of
node/protocols/gms.py's Gms).

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

from typing import TYPE_CHECKING

from node.protocols.base import NEVER, Effects, MulticastLayer
from node.protocols.gms_merge import State
from node.wire import Digest, View, ViewId, header_class

if TYPE_CHECKING:
    from node.protocols.gms import GmsProps, PendingView

FIND = header_class("GMS", "FIND")
FIND_RSP = header_class("GMS", "FIND_RSP")
JOIN_REQ = header_class("GMS", "JOIN_REQ")
JOIN_RSP = header_class("GMS", "JOIN_RSP")
LEAVE_REQ = header_class("GMS", "LEAVE_REQ")
LEAVE_RSP = header_class("GMS", "LEAVE_RSP")


class JoinLeave:
    """How a member gets into the group and out of it, for Gms (a mixin: the state is Gms's, and so are the view
    changes it starts: `_install`, `_start_view_change`, `_process_requests`, `_new_view_id`)."""

    local: str
    props: GmsProps
    c: dict[str, int]
    state: State
    view: View | None
    multicast: MulticastLayer | None
    _responses: dict[str, ViewId]  # who answered (or asked) during the current discovery, and its view id
    _deadline: float
    _attempts: int
    _join_target: str | None
    _leave_xmit: float
    _lock: tuple[int, str, float] | None
    _pending: PendingView | None

    def _start_discovery(self, now: float, out: Effects) -> None:
        self.state = State.DISCOVERY
        self._responses = {}
        self._deadline = now + self.props.discovery_timeout
        self._attempts += 1
        self.c["join_attempts"] += 1
        out.send(None, FIND())
        self.c["finds_sent"] += 1

    def _handle_find(self, src: str, out: Effects) -> None:
        """Answers with our view id (0 while joining). A joiner also notes the finder as a joiner: if it is the
        smaller one, we wait for it to coordinate rather than become a singleton ourselves."""
        self.c["finds_received"] += 1
        if self.state is State.INIT:
            return
        if self.state is State.DISCOVERY:
            self._responses.setdefault(src, ViewId(src, 0))  # an answer it gives us later overrides this
        joined = self.state in (State.MEMBER, State.LEAVING) and self.view is not None
        view_id = self.view.view_id if joined and self.view is not None else ViewId(self.local, 0)
        out.send(src, FIND_RSP(view_id))
        self.c["find_rsps_sent"] += 1

    def _handle_find_rsp(self, src: str, view_id: ViewId, now: float, out: Effects) -> None:
        self.c["find_rsps_received"] += 1
        self.note_view_id(view_id)
        if self.state is not State.DISCOVERY:
            return
        self._responses[src] = view_id
        if self.props.break_on_coord_rsp and view_id.id > 0 and view_id.creator == src:
            self._discovery_done(now, out)

    def _discovery_done(self, now: float, out: Effects) -> None:
        found = [vid for vid in self._responses.values() if vid.id > 0]
        if found:
            target = max(found, key=ViewId.key).creator
            self.state = State.JOINING
            self._join_target = target
            self._deadline = now + self.props.join_timeout
            out.send(target, JOIN_REQ())
            self.c["join_reqs_sent"] += 1
            return
        joiners = sorted(m for m, vid in self._responses.items() if vid.id == 0 and m != self.local)
        if not joiners or self.local < joiners[0]:
            self._become_singleton(now, out)
            for j in joiners:  # they wait for the smallest joiner: tell them it coordinates now
                out.send(j, FIND_RSP(self.view.view_id if self.view is not None else ViewId(self.local, 0)))
            self.c["find_rsps_sent"] += len(joiners)
        elif self._gave_up():
            self._become_singleton(now, out)
        else:
            self._start_discovery(now, out)  # the smallest joiner becomes coordinator: ask again

    def _gave_up(self) -> bool:
        limit = self.props.max_join_attempts
        return limit > 0 and self._attempts >= limit

    def _become_singleton(self, now: float, out: Effects) -> None:
        self.c["singletons"] += 1
        self._become_member(View(self._new_view_id(self.local), (self.local,)), {}, now, out)

    def _handle_join_rsp(self, view: View, digest: Digest, now: float, out: Effects) -> None:
        self.c["join_rsps_received"] += 1
        if self.state not in (State.DISCOVERY, State.JOINING) or self.local not in view.members:
            return
        self._become_member(view, digest, now, out)

    def _become_member(self, view: View, digest: Digest, now: float, out: Effects) -> None:
        """Joined (or became a singleton): install the view, take the digest, start accepting multicasts."""
        self.state = State.MEMBER
        self._deadline = NEVER
        self._install(view, now, out)
        mc = self.multicast
        if mc is not None:
            if digest:
                mc.set_digest(digest, now, out)
            mc.become_server(now, out)
        self._process_requests(now, out)

    def _tick_joining(self, now: float, out: Effects) -> None:
        """The discovery or join deadline of a joiner."""
        if now < self._deadline:
            return
        if self.state is State.DISCOVERY:
            self._discovery_done(now, out)
        elif self.state is State.JOINING:
            self.c["join_timeouts"] += 1
            if self._gave_up():
                self._become_singleton(now, out)
            else:
                self._start_discovery(now, out)

    # --- leaving --------------------------------------------------------------------------------------------------

    def leave(self, now: float, out: Effects) -> None:
        """Graceful leave: LEAVE_REQ to the coordinator (resent until LEAVE_RSP or leave_timeout); a coordinator
        hands over by installing the view without itself at the others."""
        if self.state in (State.LEAVING, State.LEFT):
            return
        if self.state is not State.MEMBER or self.view is None:
            self._left(out)
            return
        others = [m for m in self.view.members if m != self.local]
        if not others:
            self._left(out)
            return
        if self.is_coord:
            self._cancel_merge(out)
            self._lock = None
            self._pending = None
            new_view = View(self._new_view_id(others[0]), tuple(others))
            self.state = State.LEAVING
            self._deadline = NEVER
            self._start_view_change(new_view, now, out, leaving_self=True)
            return
        self.state = State.LEAVING
        self._deadline = now + self.props.leave_timeout
        self._send_leave_req(now, out)

    def _send_leave_req(self, now: float, out: Effects) -> None:
        coord = self.coordinator
        if coord is not None and coord != self.local:
            out.send(coord, LEAVE_REQ())
            self.c["leave_reqs_sent"] += 1
        self._leave_xmit = self._next_xmit(now)

    def _left(self, out: Effects) -> None:
        self.state = State.LEFT
        self._deadline = NEVER
        self._leave_xmit = NEVER
        self._pending = None
        self._cancel_merge(out)
        self._lock = None
        self.routes.member_left()
        out.event("left")

    def _tick_leaving(self, now: float, out: Effects) -> bool:
        """The leave deadline and LEAVE_REQ resends of a leaving member; True once it has left."""
        if self._deadline == NEVER:  # a leaving coordinator: its view change decides
            return False
        if now >= self._deadline:
            self.c["leave_timeouts"] += 1
            self._left(out)
            return True
        if now >= self._leave_xmit:
            self._send_leave_req(now, out)
        return False
