"""The protocol contract: what every sans-IO protocol of a stack is, what it may return, how it declares properties.

A protocol (a `Layer`, JGroups' Protocol) is a state machine. It is handed a batch of messages from one sender, an
application send, a view or a timer tick, always with `now` (seconds, from whatever clock drives it: the simulator's
virtual clock or the runtime's monotonic clock), and one `Effects` to append what it wants done: `Send`s, `Deliver`s
and history `Event`s. `next_wakeup()` says when it wants its next tick. No sockets, clocks or threads inside.

Every layer declares its name, its wire protocol, its `Properties` (one dataclass: name, type, default, unit and
description of each property, see `prop`) and its counters; the constructor, `set_property` and `counters` are here
once. The roles the stack relies on are abstract classes with the methods it calls: `UnicastLayer`,
`MulticastLayer`, `MembershipLayer`, `StabilityLayer`, `FailureDetector`. A protocol that needs another one gets
it at construction (`BuildContext`, typed by role), or asks the stack (`StackRoutes`), never by reaching into it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import ClassVar, Generic, NamedTuple, Protocol, TypeVar

from node.units import float_of, int_of, parse_duration
from node.wire import Digest, Message, View, ViewId

NEVER = math.inf

# A history event field: JSON values as node/history.py writes them.
EventValue = str | int | float | bool | None | list[str] | tuple[int, ...]


# --- effects --------------------------------------------------------------------------------------------------------


class Send(NamedTuple):
    """Send `message` to `dest` (an address), or multicast it to the group (dest None)."""

    dest: str | None
    message: Message


class Deliver(NamedTuple):
    """A payload handed to the application. seqno is the protocol's per-connection (or per-sender) seqno."""

    kind: str  # "unicast" | "multicast"
    sender: str
    payload: bytes
    conn_id: int | None
    seqno: int


class Event(NamedTuple):
    """A history event (docs/scenario-format.md) without t and member: `kind` is its `event`, `fields` the rest in
    order; a `peer` field holding an address is written as the peer's name."""

    kind: str
    fields: dict[str, EventValue]


_new = tuple.__new__


class Effects:
    """What one or more protocol calls want done, each kind in the order it happened; the stack (or a test) drains
    it. Sends, deliveries and events have different consumers (the network, the application, the history), so they
    are kept apart: no consumer has to sort them out of one list."""

    __slots__ = ("delivers", "events", "sends")

    def __init__(self) -> None:
        self.sends: list[Send] = []
        self.delivers: list[Deliver] = []
        self.events: list[Event] = []

    def send(self, dest: str | None, message: Message) -> None:
        self.sends.append(_new(Send, (dest, message)))  # Send(dest, message) without NamedTuple's __new__ call cost

    def event(self, kind: str, **fields: EventValue) -> None:
        self.events.append(_new(Event, (kind, fields)))

    def clear(self) -> None:
        self.sends.clear()
        self.delivers.clear()
        self.events.clear()


class EventlessEffects(Effects):
    """Effects that drop history events as they are made, for a driver that records no history (the simulator with
    record=False): sends and deliveries are the same, the events cost nothing."""

    __slots__ = ()

    def event(self, kind: str, **fields: EventValue) -> None:
        pass


# --- properties -----------------------------------------------------------------------------------------------------

T = TypeVar("T")
SECONDS = "s"  # the unit of durations: given as "200ms", "2s" or a number of seconds, held in seconds


def prop(default: T, description: str, unit: str = "") -> T:
    """Declares one property of a `Properties` dataclass: its default, what it does and its unit (SECONDS for
    durations). Its name and type are the field's."""
    return field(default=default, metadata={"unit": unit, "description": description})


class PropertySpec(NamedTuple):
    """One declared property, as `chaosbed stacks` prints it."""

    name: str
    type: str
    default: object
    unit: str
    description: str


@dataclass
class Properties:
    """Base of a protocol's properties: typed fields with JGroups names, each declared with `prop`."""

    @classmethod
    def declared(cls) -> list[PropertySpec]:
        return [
            PropertySpec(
                f.name,
                f.type if isinstance(f.type, str) else f.type.__name__,
                f.default,
                f.metadata.get("unit", ""),
                f.metadata.get("description", ""),
            )
            for f in fields(cls)
        ]

    @classmethod
    def durations(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls) if f.metadata.get("unit") == SECONDS)

    def set(self, name: str, value: object) -> None:
        """Sets one property from a user-given value (JSON or text), with a clear error naming it; on an error the
        property keeps its value."""
        self.update({name: value})

    def update(self, values: Mapping[str, object]) -> None:
        """Sets properties from user-given values, then validates them together: a pair such as MERGE's
        min_interval and max_interval can move past each other's old values. On an error nothing changes."""
        before = self.as_dict()
        try:
            for name, value in values.items():
                self._assign(name, value)
            self.validate()
        except ValueError:
            for name, value in before.items():
                setattr(self, name, value)
            raise

    def _assign(self, name: str, value: object) -> None:
        known = {f.name: f for f in fields(self)}
        if name not in known:
            raise ValueError(f"unknown property {name!r}; known: {', '.join(sorted(known))}")
        current = getattr(self, name)
        try:
            if known[name].metadata.get("unit") == SECONDS:
                new: object = parse_duration(value)
            elif isinstance(current, bool):
                if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
                    new = value.lower() in ("true", "1", "yes")
                elif isinstance(value, bool | int):
                    new = bool(value)
                else:
                    raise ValueError
            elif isinstance(current, int):
                new = int_of(value)
            elif isinstance(current, float):
                new = float_of(value)
            else:
                new = value
        except (TypeError, ValueError):
            raise ValueError(f"property {name}: bad value {value!r} (expected {type(current).__name__})") from None
        setattr(self, name, new)

    def validate(self) -> None:
        """Raises ValueError naming the property that is out of range."""

    def as_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# --- the layer contract ---------------------------------------------------------------------------------------------

# covariant: a Layer[Unicast3Props] is a Layer[Properties] (the stack holds its layers as such)
P = TypeVar("P", bound=Properties, covariant=True)


class Layer(ABC, Generic[P]):
    """One protocol of a stack. Subclasses declare NAME (stack configs, properties, counters: "unicast3"), PROTOCOL
    (the wire format's protocol: "UNICAST3"), PROPS (their Properties class) and COUNTERS (the names of `self.c`)."""

    NAME: ClassVar[str]
    PROTOCOL: ClassVar[str]
    PROPS: ClassVar[type[Properties]]
    COUNTERS: ClassVar[tuple[str, ...]]

    def __init__(self, local: str, props: P | None = None) -> None:
        self.local = local
        self.props: P = props if props is not None else self.PROPS()  # type: ignore[assignment]
        self.props.validate()
        self.c = dict.fromkeys(self.COUNTERS, 0)

    @classmethod
    def create(cls, local: str, props: Mapping[str, object], ctx: BuildContext) -> Layer[P]:
        """The layer for a stack: properties from the user's values, collaborators from `ctx`."""
        return cls(local, cls.make_props(props))

    @classmethod
    def make_props(cls, values: Mapping[str, object]) -> P:
        p = cls.PROPS()
        p.update(values)
        return p  # type: ignore[return-value]

    # --- driving --------------------------------------------------------------------------------------------------

    @abstractmethod
    def handle(self, src: str, msgs: list[Message], now: float, out: Effects) -> None:
        """A batch of this protocol's messages from src, in arrival order."""

    @abstractmethod
    def next_wakeup(self) -> float:
        """When the next `tick` is wanted (NEVER: no timer; -NEVER: at once)."""

    @abstractmethod
    def tick(self, now: float, out: Effects) -> None:
        """Timers: the stack calls it once `now` reached `next_wakeup()`."""

    def install_view(self, view: View, now: float, out: Effects) -> None:
        """A new view was installed (by the membership layer, routed by the stack). Default: nothing to do."""

    def stop(self) -> None:
        """The member left the group: no more timers. Default: nothing to do."""

    # --- management -----------------------------------------------------------------------------------------------

    def set_property(self, name: str, value: object) -> None:
        self.props.set(name, value)
        self.property_changed(name)

    def property_changed(self, name: str) -> None:
        """After `set_property`: timers or state that depend on the property. Default: nothing."""

    def counters(self) -> dict[str, int]:
        """The counters, then the `gauges()` (sizes of the current state)."""
        stats = dict(self.c)
        stats.update(self.gauges())
        return stats

    def gauges(self) -> dict[str, int]:
        return {}

    def is_idle(self) -> bool:
        """Nothing in flight that this layer still waits for (the simulator's quiet)."""
        return True


class ConnectionTable(Protocol):
    """What the stack reads of a connection's retransmit table (node/tables.py)."""

    def __len__(self) -> int: ...

    def num_missing(self) -> int: ...

    @property
    def hd(self) -> int: ...

    @property
    def hr(self) -> int: ...


class Connection(Protocol):
    """One direction of a unicast connection: its conn-id and its retransmit table (messages not yet acked, or not
    yet delivered)."""

    @property
    def conn_id(self) -> int: ...

    @property
    def table(self) -> ConnectionTable: ...


MAX_CLOSED_REMEMBERED = 1024  # peers whose removed receive connection delivered_by_peer still reports


class UnicastLayer(Layer[P]):
    """Reliable unicast (UNICAST3, UNICAST2): a send and a receive connection per peer address."""

    # True when a message stays unacknowledged only while the sender still works to get it delivered (UNICAST3 acks
    # every message). False when acknowledgement is a periodic round (UNICAST2 purges on its STABLE, every
    # stable_interval): an unacknowledged message there is bookkeeping, not something anyone waits for.
    ACKS_EACH_MESSAGE = True

    send_table: Mapping[str, Connection]  # peer -> what we sent it (hd: acked or purged, hr: highest sent)
    recv_table: Mapping[str, Connection]  # peer -> what it sent us (hd: highest delivered)

    def __init__(self, local: str, props: P | None = None) -> None:
        super().__init__(local, props)
        self._delivered_on_closed: dict[str, tuple[int, int]] = {}  # see remember_delivered

    @abstractmethod
    def send(self, dest: str, payload: bytes, now: float, out: Effects) -> int:
        """Sends an application payload to dest; returns its seqno on the connection."""

    @abstractmethod
    def send_conn_id(self, dest: str) -> int | None:
        """The conn-id of the send connection to dest (None without one)."""

    @abstractmethod
    def close_connection(self, peer: str, now: float, out: Effects) -> None:
        """Closes both directions to peer (the `close-connection` fault)."""

    @abstractmethod
    def set_members(self, members: Iterable[str] | None) -> None:
        """The current membership (None: unknown)."""

    def unacked_by_peer(self) -> dict[str, int]:
        """Peer address -> messages sent to it and not acknowledged (every send connection)."""
        return {peer: len(conn.table) for peer, conn in self.send_table.items()}

    def unacked(self, dest: str) -> int:
        """Messages sent to dest and not acknowledged (the workload's flow control)."""
        conn = self.send_table.get(dest)
        return len(conn.table) if conn is not None else 0

    def missing_by_peer(self) -> dict[str, int]:
        """Peer address -> messages from it known to be missing here (every receive connection)."""
        return {peer: conn.table.num_missing() for peer, conn in self.recv_table.items()}

    def sent_by_peer(self) -> dict[str, tuple[int, int]]:
        """Peer address -> (conn-id, highest seqno sent) of each send connection."""
        return {peer: (conn.conn_id, conn.table.hr) for peer, conn in self.send_table.items()}

    def delivered_by_peer(self) -> dict[str, tuple[int, int]]:
        """Peer address -> (conn-id, highest seqno delivered) of each receive connection, and of the last removed one
        of a peer without a receive connection now: the orchestrator's quiet check compares it with what the peer
        sent on that connection, and a message delivered before its connection closed is not owed again."""
        live = {peer: (conn.conn_id, conn.table.hd) for peer, conn in self.recv_table.items()}
        closed = self._delivered_on_closed
        return {**closed, **live} if closed else live

    def remember_delivered(self, peer: str, conn: Connection) -> None:
        """A receive connection is being removed: keep what it delivered for delivered_by_peer (one entry per peer,
        at most MAX_CLOSED_REMEMBERED peers, the oldest forgotten first)."""
        closed = self._delivered_on_closed
        closed.pop(peer, None)
        closed[peer] = (conn.conn_id, conn.table.hd)
        while len(closed) > MAX_CLOSED_REMEMBERED:
            del closed[next(iter(closed))]

    def gauges(self) -> dict[str, int]:
        return {
            "send_conns": len(self.send_table),
            "recv_conns": len(self.recv_table),
            "unacked_msgs": sum(len(c.table) for c in self.send_table.values()),
            "undelivered_msgs": sum(len(c.table) for c in self.recv_table.values()),
            "missing_msgs": sum(c.table.num_missing() for c in self.recv_table.values()),
        }

    def install_view(self, view: View, now: float, out: Effects) -> None:
        self.set_members(view.members)


class MulticastLayer(Layer[P]):
    """Reliable multicast (NAKACK2, MCAST): per-sender FIFO windows for the members of the view."""

    @abstractmethod
    def multicast(self, payload: bytes, now: float, out: Effects) -> int:
        """Multicasts an application payload (and delivers it locally); returns its seqno."""

    @abstractmethod
    def digest(self) -> Digest:
        """member -> (highest delivered, highest received), this member's own as (highest sent, highest sent)."""

    @abstractmethod
    def set_digest(self, digest: Digest, now: float, out: Effects) -> None:
        """A joiner: windows start at the digest's highest received seqnos."""

    @abstractmethod
    def reset_windows(self, digest: Digest, members: Iterable[str], now: float, out: Effects) -> None:
        """A merge: the windows of `members` restart at the digest's offsets."""

    @abstractmethod
    def become_server(self, now: float, out: Effects) -> None:
        """Joining is done: messages of the group are accepted from now on."""

    @abstractmethod
    def missing_by_sender(self) -> dict[str, int]:
        """Sender address -> its multicasts known to be missing here."""

    def pending(self) -> int:
        """Multicasts held back by flow control (the runtime's back-pressure). Default: none."""
        return 0

    @property
    def blocked(self) -> bool:
        """Flow control refuses more multicasts now. Default: never."""
        return False

    def close(self) -> int:
        """Stopping: drops what is held back; returns how many. Default: nothing is held."""
        return 0

    def stop(self) -> None:
        self.close()


class MembershipLayer(Layer[P]):
    """Group membership (GMS): views, joins, leaves, suspicions and the merge handshake."""

    @property
    @abstractmethod
    def view(self) -> View | None:
        """The installed view (None before joining)."""

    @property
    @abstractmethod
    def is_coord(self) -> bool: ...

    @property
    @abstractmethod
    def coordinator(self) -> str | None: ...

    @property
    @abstractmethod
    def holds_multicasts(self) -> bool:
        """The stack holds application multicasts back (the member has not joined yet, or a merge handshake is under
        way)."""

    @property
    @abstractmethod
    def has_left(self) -> bool: ...

    @abstractmethod
    def leave(self, now: float, out: Effects) -> None: ...

    @abstractmethod
    def suspect(self, member: str, now: float, out: Effects) -> None: ...

    @abstractmethod
    def suspect_all(self, members: list[str], now: float, out: Effects) -> None:
        """Members suspected at the same instant (one failure-detection check): a coordinator excludes them in one
        view, as JGroups' view bundling does, not one view after the other."""

    @abstractmethod
    def unsuspect(self, member: str, now: float, out: Effects) -> None: ...

    @abstractmethod
    def note_view_id(self, view_id: ViewId) -> None:
        """A view id heard anywhere: later views get higher counters."""

    @abstractmethod
    def start_merge(self, reps: dict[ViewId, str], reported: dict[str, ViewId], now: float, out: Effects) -> None:
        """MERGE found subgroups and this member leads the merge."""


class StabilityLayer(Layer[P]):
    """STABLE: learns how many multicast payload bytes the application was handed (its max_bytes trigger), and
    from the stack whether a merge handshake is under way (`holds_own_purges`: no purge of our own multicasts)."""

    holds_own_purges: Callable[[], bool]

    @abstractmethod
    def note_delivered(self, nbytes: int) -> None: ...


class FailureDetector(Layer[P]):
    """FD: who was heard from recently."""

    @abstractmethod
    def heard_within(self, member: str, now: float, period: float) -> bool: ...

    @abstractmethod
    def alive(self, member: str, now: float) -> bool:
        """Heard from within the detector's own timeout."""


class StackRoutes(Protocol):
    """What a protocol may ask of the stack it runs in: calls routed to the other layers by role."""

    def install_view(self, view: View, now: float, out: Effects) -> None:
        """Installs a view in every layer but the membership layer, bottom first."""

    def alive(self, member: str, now: float) -> bool:
        """The failure detector's verdict (True without one)."""

    def member_left(self) -> None:
        """Stops every layer but the membership layer."""


class BuildContext:
    """What a layer may be given at construction besides its address and properties: the layers below it, by
    role, the stack's routes and the stack's seeds. `build_stack` fills it in as it builds, bottom first."""

    __slots__ = ("conn_id_start", "liveness", "membership", "multicast", "routes", "seed")

    def __init__(self, conn_id_start: int, seed: int | None, routes: StackRoutes | None = None) -> None:
        self.conn_id_start = conn_id_start
        self.seed = seed
        self.routes = routes
        self.multicast: MulticastLayer[Properties] | None = None
        self.membership: MembershipLayer[Properties] | None = None
        self.liveness: FailureDetector[Properties] | None = None

    def add(self, layer: Layer[Properties]) -> None:
        """Makes a built layer known to the layers above it, by role."""
        if isinstance(layer, MulticastLayer):
            self.multicast = layer
        elif isinstance(layer, MembershipLayer):
            self.membership = layer
        elif isinstance(layer, FailureDetector):
            self.liveness = layer
