"""FD: failure detection by heartbeats (like JGroups' FD_ALL / FD_ALL3).

Every member of a view of two or more multicasts HEARTBEAT every `interval` (alone in its view it falls silent, as
FD_ALL3 does). A message of this protocol from a member, whichever it is, counts as a sign of life. Every
`timeout_check_interval` a member suspects each view member it has not heard from for `timeout` and tells its GMS
(which excludes the member if it coordinates, or takes over if every member before it is suspected); a
non-coordinator also sends SUSPECT(member) to the coordinator. A later heartbeat un-suspects.

A coordinator that receives SUSPECT(m) verifies it locally (JGroups runs VERIFY_SUSPECT for this): it accepts the
suspicion only if it has not heard from m for `timeout / 2` itself, so a member that one reporter cannot hear (a
one-way cut) is not excluded while the coordinator still hears it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from node.protocols.base import NEVER, SECONDS, BuildContext, Effects, FailureDetector, Properties, prop
from node.wire import Message, View
from node.wire_headers import FD_HEARTBEAT as HEARTBEAT
from node.wire_headers import FD_SUSPECT as SUSPECT


class SuspectListener(Protocol):
    """What FD needs from GMS."""

    @property
    def is_coord(self) -> bool: ...

    @property
    def coordinator(self) -> str | None: ...

    def suspect(self, member: str, now: float, out: Effects) -> None: ...

    def suspect_all(self, members: list[str], now: float, out: Effects) -> None: ...

    def unsuspect(self, member: str, now: float, out: Effects) -> None: ...


@dataclass
class FdProps(Properties):
    """Properties with JGroups' FD_ALL names and defaults; durations in seconds."""

    interval: float = prop(8.0, "heartbeat interval", SECONDS)
    timeout: float = prop(40.0, "a member not heard from for this long is suspected", SECONDS)
    timeout_check_interval: float = prop(2.0, "how often members are checked against timeout", SECONDS)

    def validate(self) -> None:
        for name in ("interval", "timeout", "timeout_check_interval"):
            if getattr(self, name) <= 0:
                raise ValueError(f"fd.{name} must be > 0")


class Fd(FailureDetector[FdProps]):
    """The FD state machine of one member."""

    NAME = "fd"
    PROTOCOL = "FD"
    PROPS = FdProps
    COUNTERS = (
        "heartbeats_sent",
        "heartbeats_received",
        "suspects_sent",
        "suspects_received",
        "suspect_reports_accepted",
        "suspect_reports_refuted",
        "suspicions",
        "unsuspicions",
        "checks",
    )

    def __init__(self, local: str, props: FdProps | None = None, *, membership: SuspectListener | None = None) -> None:
        super().__init__(local, props)
        self.membership = membership  # told about suspicions (GMS, below FD in the stack)
        self.members: tuple[str, ...] = ()
        self.last_heard: dict[str, float] = {}  # any sender (members or not): used by MERGE for reachability
        self.suspected: set[str] = set()
        self.active = False
        self.left = False
        self._next_heartbeat = NEVER
        self._next_check = NEVER

    @classmethod
    def create(cls, local: str, props: Mapping[str, object], ctx: BuildContext) -> Fd:
        return cls(local, cls.make_props(props), membership=ctx.membership)

    # --- membership -----------------------------------------------------------------------------------------------

    def install_view(self, view: View, now: float, out: Effects) -> None:
        """Starts (or keeps) the tasks while the view holds someone else, and stops them in a view of one, as
        JGroups' FD_ALL3 does (FailureDetection.handleView): a member that dropped everyone falls silent, so those
        that still list it suspect it. Members new to this view get a full timeout from now."""
        previous = set(self.members)
        self.members = view.members
        for m in view.members:
            if m not in previous:
                self.last_heard[m] = max(self.last_heard.get(m, now), now)
        self.suspected &= set(view.members)
        if self.left:
            return
        if len(view.members) <= 1:
            self._halt()
        elif not self.active:
            self.active = True
            self._next_heartbeat = now
            self._next_check = now + self.props.timeout_check_interval

    def stop(self) -> None:
        """The member left: no more heartbeats or suspicions, whatever view comes."""
        self.left = True
        self._halt()

    def _halt(self) -> None:
        self.active = False
        self._next_heartbeat = self._next_check = NEVER

    def heard_within(self, member: str, now: float, period: float) -> bool:
        t = self.last_heard.get(member)
        return t is not None and now - t <= period

    def alive(self, member: str, now: float) -> bool:
        return self.heard_within(member, now, self.props.timeout)

    # --- network side ---------------------------------------------------------------------------------------------

    def handle(self, src: str, msgs: list[Message], now: float, out: Effects) -> None:
        if src == self.local:
            return
        self.last_heard[src] = now
        for m in msgs:
            if isinstance(m, HEARTBEAT):
                self.c["heartbeats_received"] += 1
            elif isinstance(m, SUSPECT):
                self.c["suspects_received"] += 1
                self._handle_suspect_report(m.member, now, out)
        if src in self.suspected:
            self.suspected.discard(src)
            self.c["unsuspicions"] += 1
            if self.membership is not None:
                self.membership.unsuspect(src, now, out)

    def _handle_suspect_report(self, member: str, now: float, out: Effects) -> None:
        membership = self.membership
        if membership is None or not membership.is_coord or member == self.local or member not in self.members:
            return
        if self.heard_within(member, now, self.props.timeout / 2):
            self.c["suspect_reports_refuted"] += 1
            return
        self.c["suspect_reports_accepted"] += 1
        self._suspect(member, now, out, report=False)

    # --- timers ---------------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float:
        return min(self._next_heartbeat, self._next_check) if self.active else NEVER

    def tick(self, now: float, out: Effects) -> None:
        if not self.active:
            return
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self.props.interval
            out.send(None, HEARTBEAT())
            self.c["heartbeats_sent"] += 1
        if now >= self._next_check:
            self._next_check = now + self.props.timeout_check_interval
            self._check(now, out)

    def _check(self, now: float, out: Effects) -> None:
        self.c["checks"] += 1
        timeout = self.props.timeout
        heard, quiet = self.last_heard, [m for m in self.members if m != self.local and m not in self.suspected]
        due = [m for m in quiet if now - heard.get(m, now) >= timeout]
        for m in due:
            self._suspect(m, now, out, report=True, notify=False)
        if due and self.membership is not None:  # together: one view excludes them all (JGroups' FD_ALL + bundling)
            self.membership.suspect_all(due, now, out)
        # forget non-members not heard from for long: the table stays bounded by the senders actually alive
        for m in [m for m, t in self.last_heard.items() if m not in self.members and now - t > 2 * timeout]:
            del self.last_heard[m]

    def _suspect(self, member: str, now: float, out: Effects, *, report: bool, notify: bool = True) -> None:
        self.suspected.add(member)
        self.c["suspicions"] += 1
        out.event("suspect", peer=member)
        membership = self.membership
        if membership is None:
            return
        coord = membership.coordinator
        if report and coord is not None and coord != self.local and coord != member:
            out.send(coord, SUSPECT(member))
            self.c["suspects_sent"] += 1
        if notify:
            membership.suspect(member, now, out)

    # --- introspection --------------------------------------------------------------------------------------------

    def property_changed(self, name: str) -> None:
        if self.active:
            self._next_heartbeat = self._next_check = -NEVER  # apply at the next tick

    def gauges(self) -> dict[str, int]:
        return {"suspected": len(self.suspected), "members": len(self.members)}
