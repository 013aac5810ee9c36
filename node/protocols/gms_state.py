"""The state GMS's parts share (node/protocols/gms.py and the components it owns: gms_views.py, gms_join.py,
gms_merge.py): its properties, and one `GmsState` object holding the member's identity, counters, the layers it
drives and the membership state. The components read and change this one object; none holds state of its own."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from enum import Enum

from node.protocols.base import NEVER, SECONDS, Effects, MulticastLayer, Properties, StackRoutes, prop
from node.wire import Digest, Message, View, ViewId
from node.wire_headers import GMS_CANCEL_MERGE as CANCEL_MERGE


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
        " previous view (JGRP-940: they purged what only their subgroup had; those restart at what they can still "
        "resend); False = only of members new to our view (the flawed variant: scenarios/bugs/merge-overlapping.toml)",
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


class State(Enum):
    """GMS's states."""

    INIT = "init"  # not started: the first tick starts discovery
    DISCOVERY = "discovery"
    JOINING = "joining"
    MEMBER = "member"
    LEAVING = "leaving"
    LEFT = "left"


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


@dataclass
class GmsState:
    """Everything GMS's parts share: the member's address, properties and counters (the layer's own objects), the
    multicast layer it drives (None without one) and the stack's routes, then the membership state."""

    local: str
    props: GmsProps
    c: dict[str, int]
    multicast: MulticastLayer[Properties] | None
    routes: StackRoutes
    state: State = State.INIT
    view: View | None = None
    max_counter: int = 0  # highest view id counter seen anywhere
    # joining
    responses: dict[str, ViewId] = field(default_factory=dict)  # who answered (or asked) during this discovery
    deadline: float = NEVER  # discovery / join / leave deadline, by state
    attempts: int = 0
    # coordinator
    joins: list[str] = field(default_factory=list)
    leaves: list[str] = field(default_factory=list)
    suspected: set[str] = field(default_factory=set)
    pending: PendingView | None = None
    # leaving
    leave_xmit: float = NEVER
    # merging
    merge: MergeRound | None = None
    merge_counter: int = 0
    merge_id_base: int = 0  # set from the address: merge ids of different leaders differ
    lock: tuple[int, str, float] | None = None  # (merge_id, leader, until) as a merge participant
    delivered: dict[str, int] = field(default_factory=dict)  # former members -> highest of their multicasts delivered
    # addresses that left gracefully through this coordinator (oldest first): gone for good, a restart is a new
    # address, so a merge never asks them in (their last INFO may arrive after the view without them)
    departed: dict[str, None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.merge_id_base = zlib.crc32(self.local.encode()) << 32

    # --- queries --------------------------------------------------------------------------------------------------

    @property
    def is_coord(self) -> bool:
        return self.state is State.MEMBER and self.view is not None and self.view.coordinator == self.local

    @property
    def coordinator(self) -> str | None:
        return self.view.coordinator if self.view is not None else None

    def busy(self) -> bool:
        """A view change, a merge we lead or a merge we answered is under way: no other view change starts."""
        return self.pending is not None or self.merge is not None or self.lock is not None

    def digest(self) -> Digest:
        return self.multicast.digest() if self.multicast is not None else {}

    def note_departed(self, members: list[str], limit: int) -> None:
        """Members that left gracefully (their LEAVE_REQ handled here); the oldest beyond `limit` are forgotten."""
        for m in members:
            self.departed.pop(m, None)
            self.departed[m] = None
        while len(self.departed) > limit:
            del self.departed[next(iter(self.departed))]

    def alive(self, member: str, now: float) -> bool:
        return self.routes.alive(member, now)

    def next_xmit(self, now: float) -> float:
        """When an unacked VIEW or LEAVE_REQ is sent again: never with view_xmit_interval = 0 (the flawed variant of
        reliable view installation: a VIEW lost on the way is lost for good, see gms-leave-view-lost.toml)."""
        interval = self.props.view_xmit_interval
        return now + interval if interval > 0 else NEVER

    # --- view ids -------------------------------------------------------------------------------------------------

    def new_view_id(self, creator: str, *counters: int) -> ViewId:
        self.max_counter = max((self.max_counter, *counters)) + 1
        return ViewId(creator, self.max_counter)

    def note_view_id(self, view_id: ViewId) -> None:
        """A view id heard anywhere (INFO, FIND_RSP): later views get higher counters."""
        self.max_counter = max(self.max_counter, view_id.id)

    # --- the merge round this member leads ------------------------------------------------------------------------

    def cancel_merge(self, out: Effects) -> None:
        """Drops the merge we lead, if any, and frees the members that answered it (JGroups' CANCEL_MERGE): they
        would otherwise hold back their multicasts and refuse other merges until merge_timeout. A view change, a
        takeover, leaving and an abandoned merge all end the round this way."""
        rnd = self.merge
        self.merge = None
        if rnd is None:
            return
        answered = [m for m in rnd.answers if m != self.local]
        for m in answered:
            out.send(m, CANCEL_MERGE(rnd.merge_id))
        self.c["merge_cancels_sent"] += len(answered)
