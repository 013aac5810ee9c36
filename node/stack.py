"""A member's protocol stack: composes sans-IO protocols from a config and moves bytes in and out of them.

The stack owns the only I/O-shaped edges a protocol has: datagrams in (decoded, checked, split into one batch per
protocol), and datagrams out (a protocol's sends bundled per destination, several messages per datagram, under
`max_datagram_size`). Whoever drives it (the simulator, node/runtime.py) calls `receive`, `send`, `tick`, then
`drain()` and does the I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from node import wire
from node.address import make_address, name_of
from node.protocols.base import Delivery, Outbox

MAX_DATAGRAM_SIZE = 60_000  # below the 65,507-byte UDP limit, leaving room for headers

STACK_COUNTERS = (
    "datagrams_sent",
    "datagrams_received",
    "bytes_sent",
    "bytes_received",
    "malformed_datagrams",
    "wrong_cluster",
    "wrong_dest",
    "unknown_protocol_msgs",
    "multicasts_held",
)


class Output(NamedTuple):
    datagrams: list[tuple[str | None, bytes]]  # (dest address or None for multicast, bytes)
    delivers: list[Delivery]
    events: list[dict[str, Any]]


class _BuildContext:
    """What factories may need besides the address and their properties: earlier protocols of the stack."""

    def __init__(self, conn_id_start: int, seed: int | None) -> None:
        self.conn_id_start = conn_id_start
        self.seed = seed
        self.multicast: Any = None


def _props(p: Any, values: Mapping[str, Any]) -> Any:
    p.update(dict(values))
    return p


def _unicast3(local: str, props: Mapping[str, Any], ctx: _BuildContext) -> Any:
    from node.protocols.unicast3 import Unicast3, Unicast3Props

    return Unicast3(local, _props(Unicast3Props(), props), conn_id_start=ctx.conn_id_start)


def _unicast2(local: str, props: Mapping[str, Any], ctx: _BuildContext) -> Any:
    from node.protocols.unicast2 import Unicast2, Unicast2Props

    return Unicast2(local, _props(Unicast2Props(), props), conn_id_start=ctx.conn_id_start)


def _nakack2(local: str, props: Mapping[str, Any], ctx: _BuildContext) -> Any:
    from node.protocols.nakack2 import Nakack2, Nakack2Props

    return Nakack2(local, _props(Nakack2Props(), props))


def _mcast(local: str, props: Mapping[str, Any], ctx: _BuildContext) -> Any:
    from node.protocols.mcast import Mcast, McastProps

    return Mcast(local, _props(McastProps(), props))


def _stable(local: str, props: Mapping[str, Any], ctx: _BuildContext) -> Any:
    from node.protocols.stable import Stable, StableProps

    if ctx.multicast is None:
        raise ValueError("stable needs a multicast protocol below it (nakack2)")
    return Stable(local, ctx.multicast, _props(StableProps(), props))


def _gms(local: str, props: Mapping[str, Any], ctx: _BuildContext) -> Any:
    from node.protocols.gms import Gms, GmsProps

    return Gms(local, _props(GmsProps(), props))


def _fd(local: str, props: Mapping[str, Any], ctx: _BuildContext) -> Any:
    from node.protocols.fd import Fd, FdProps

    return Fd(local, _props(FdProps(), props))


def _merge(local: str, props: Mapping[str, Any], ctx: _BuildContext) -> Any:
    from node.protocols.merge import Merge, Merge3Props

    return Merge(local, _props(Merge3Props(), props), seed=ctx.seed)


# protocol name -> factory(local address, its properties, build context)
PROTOCOLS: dict[str, Callable[[str, Mapping[str, Any], _BuildContext], Any]] = {
    "unicast3": _unicast3,
    "unicast2": _unicast2,
    "nakack2": _nakack2,
    "mcast": _mcast,
    "stable": _stable,
    "gms": _gms,
    "fd": _fd,
    "merge": _merge,
}

MEMBERSHIP = ("gms", "fd", "merge")

# stack name -> its protocols, bottom first (like a JGroups stack config)
STACKS: dict[str, tuple[str, ...]] = {
    "unicast3": ("unicast3",),
    "unicast2": ("unicast2",),
    "unicast3+gms": ("unicast3", *MEMBERSHIP),
    "unicast3+nakack2": ("unicast3", "nakack2", "stable", *MEMBERSHIP),
    "unicast2+nakack2": ("unicast2", "nakack2", "stable", *MEMBERSHIP),
    "unicast3+mcast": ("unicast3", "mcast", *MEMBERSHIP),
}


def has_membership(stack: str) -> bool:
    return "gms" in STACKS.get(stack, ())


class Stack:
    """One member's stack. Not thread-safe: one driver calls it.

    `protocols` are the stack's sans-IO protocols, bottom first. The stack knows three roles by protocol name:
    the unicast protocol (unicast3 | unicast2, required), the multicast protocol (nakack2 | mcast, optional) and
    membership (gms, optional); protocols that need each other get references when the stack is built
    (`build_stack`): GMS installs views in the others, FD reports suspicions to GMS, MERGE starts merges in GMS,
    STABLE hands stability digests to NAKACK2. Every protocol appends to the one shared Outbox, so their sends,
    deliveries and history events come out of `drain()` together, in the order they happened.
    """

    UNICAST = ("unicast3", "unicast2")
    MULTICAST = ("nakack2", "mcast")

    def __init__(
        self,
        local: str,
        protocols: list[Any] | Any,
        *,
        cluster: str = "chaosbed",
        max_datagram_size: int = MAX_DATAGRAM_SIZE,
    ) -> None:
        protos = protocols if isinstance(protocols, list) else [protocols]
        self.local = local
        self.cluster = cluster
        self.protocols: dict[int, Any] = {}
        self.by_name: dict[str, Any] = {}
        for proto in protos:
            proto_id = wire.PROTOCOL_IDS[proto.PROTOCOL]
            if proto_id in self.protocols:
                raise ValueError(f"protocol {proto.PROTOCOL} twice in one stack")
            self.protocols[proto_id] = proto
            self.by_name[proto.NAME] = proto
        unicast = [p for p in protos if p.NAME in self.UNICAST]
        if len(unicast) != 1:
            raise ValueError(f"a stack has exactly one unicast protocol ({' | '.join(self.UNICAST)})")
        self.unicast = unicast[0]
        multicast = [p for p in protos if p.NAME in self.MULTICAST]
        if len(multicast) > 1:
            raise ValueError(f"a stack has at most one multicast protocol ({' | '.join(self.MULTICAST)})")
        self.multicast_protocol = multicast[0] if multicast else None
        self.gms = self.by_name.get("gms")
        self.stable = self.by_name.get("stable")
        self._left = False
        self._held: list[bytes] = []  # multicasts held back during a merge handshake
        self._next_seqno = 1  # the seqno the multicast protocol gives the next multicast
        self.max_datagram_size = max_datagram_size
        self.out = Outbox()
        self.c = dict.fromkeys(STACK_COUNTERS, 0)
        self.last_error: str | None = None

    # --- driving --------------------------------------------------------------------------------------------------

    def send(self, dest: str, payload: bytes, now: float) -> int:
        """Sends a unicast application message; returns its seqno on the connection."""
        return self.unicast.send(dest, payload, now, self.out)

    def multicast(self, payload: bytes, now: float) -> int:
        """Multicasts an application message to the group; returns its seqno (MCAST with a full window holds the
        message and sends it, in order, once acks free space). During a merge handshake (GMS.holds_multicasts)
        the stack holds it back and passes it on, in order and with the seqno returned here, once the merge is
        over."""
        if self.multicast_protocol is None:
            raise ValueError("this stack has no multicast protocol")
        if self._held or (self.gms is not None and self.gms.holds_multicasts):
            self._held.append(payload)
            self.c["multicasts_held"] += 1
            return self._next_seqno + len(self._held) - 1
        return self._multicast_now(payload, now)

    def _multicast_now(self, payload: bytes, now: float) -> int:
        mark = len(self.out.delivers)
        seqno = int(self.multicast_protocol.multicast(payload, now, self.out))
        self._next_seqno = seqno + 1
        self._note_delivered(mark)
        return seqno

    def _release_held(self, now: float) -> None:
        if not self._held or (self.gms is not None and self.gms.holds_multicasts):
            return
        held, self._held = self._held, []
        for payload in held:
            self._multicast_now(payload, now)

    def _note_delivered(self, mark: int) -> None:
        """Tells STABLE how many multicast payload bytes were delivered since `mark` (its max_bytes trigger)."""
        if self.stable is None:
            return
        delivers = self.out.delivers
        n = sum(len(d.payload) for d in delivers[mark:] if d.kind == "multicast")
        if n:
            self.stable.note_delivered(n)

    # --- membership -----------------------------------------------------------------------------------------------

    @property
    def view(self) -> Any:
        """The installed view (node.wire.View), or None without membership or before joining."""
        return self.gms.view if self.gms is not None else None

    def leave(self, now: float) -> None:
        """Leaves the group gracefully (see `has_left`); without membership the member just stops."""
        if self.gms is not None:
            self.gms.leave(now, self.out)
        else:
            self._left = True

    @property
    def has_left(self) -> bool:
        return self.gms.has_left if self.gms is not None else self._left

    def receive(self, data: bytes | memoryview, now: float) -> bool:
        """Handles one datagram. Malformed or misaddressed ones are counted and dropped; returns False for those."""
        try:
            dgram = wire.decode_datagram(data)
        except wire.WireError as e:
            self.c["malformed_datagrams"] += 1
            self.last_error = str(e)
            return False
        self.c["datagrams_received"] += 1
        self.c["bytes_received"] += len(data)
        if dgram.cluster != self.cluster:
            self.c["wrong_cluster"] += 1
            return False
        if dgram.dest and dgram.dest != self.local:
            self.c["wrong_dest"] += 1  # e.g. addressed to an earlier incarnation of this member
            return False
        batches: dict[int, list[Any]] = {}
        for m in dgram.messages:
            batches.setdefault(m.PROTO_ID, []).append(m)
        mark = len(self.out.delivers)
        for proto_id, msgs in batches.items():
            proto = self.protocols.get(proto_id)
            if proto is None:
                self.c["unknown_protocol_msgs"] += len(msgs)
                continue
            proto.handle(dgram.src, msgs, now, self.out)
        self._note_delivered(mark)
        self._release_held(now)
        return True

    def tick(self, now: float) -> None:
        mark = len(self.out.delivers)
        for proto in self.protocols.values():
            if proto.next_wakeup() <= now:
                proto.tick(now, self.out)
        self._note_delivered(mark)
        self._release_held(now)

    def next_wakeup(self) -> float:
        return min(p.next_wakeup() for p in self.protocols.values())

    def drain(self) -> Output:
        """Everything the protocols asked for since the last drain, with sends bundled into datagrams."""
        out = self.out
        datagrams = self._bundle(out.sends) if out.sends else []
        result = Output(datagrams, out.delivers, out.events)
        self.out = Outbox()
        return result

    def _bundle(self, sends: list[tuple[str | None, Any]]) -> list[tuple[str | None, bytes]]:
        # Group by destination, keeping each destination's order (FIFO on the wire as the protocol sent them).
        per_dest: dict[str | None, list[Any]] = {}
        for dest, msg in sends:
            per_dest.setdefault(dest, []).append(msg)
        datagrams: list[tuple[str | None, bytes]] = []
        for dest, msgs in per_dest.items():
            budget = self.max_datagram_size - wire.datagram_overhead(self.cluster, self.local, dest)
            batch: list[Any] = []
            size = 0
            for m in msgs:
                n = wire.message_size(m)
                if batch and (size + n > budget or len(batch) == 0xFFFF):
                    datagrams.append((dest, wire.encode_datagram(self.cluster, self.local, dest, batch)))
                    batch, size = [], 0
                batch.append(m)
                size += n
            datagrams.append((dest, wire.encode_datagram(self.cluster, self.local, dest, batch)))
        self.c["datagrams_sent"] += len(datagrams)
        self.c["bytes_sent"] += sum(len(d) for _, d in datagrams)
        return datagrams

    # --- management -----------------------------------------------------------------------------------------------

    def set_property(self, protocol: str, name: str, value: Any) -> None:
        proto = self.by_name.get(protocol)
        if proto is None:
            raise ValueError(f"no protocol {protocol!r} in this stack; it has: {', '.join(self.by_name)}")
        proto.set_property(name, value)

    def counters(self) -> dict[str, dict[str, int]]:
        stats = {"stack": dict(self.c)}
        for name, proto in self.by_name.items():
            stats[name] = proto.counters()
        return stats

    def peer_address(self, name: str, announced: Mapping[str, int] | None = None) -> str:
        """The address this member sends to for peer `name`: the incarnation in its installed view; without
        membership (or a view without that peer), the incarnation the orchestrator announced (1 if never). The
        real runtime and the simulator both resolve destinations here, so a restarted peer is addressed from the
        same moment on both."""
        view = self.view
        if view is not None:
            for addr in view.members:
                if name_of(addr) == name:
                    return addr
        return make_address(name, (announced or {}).get(name, 1))

    def unacked_by_peer(self) -> dict[str, int]:
        """Peer name -> unicasts sent to it and not acknowledged yet (peers with none are left out)."""
        return {name_of(peer): len(entry.table) for peer, entry in self.unicast.send_table.items() if len(entry.table)}

    def waiting_on(self) -> dict[str, int]:
        """Peer address -> messages this member waits for with that peer: unicasts sent to it and not acknowledged,
        and unicasts and multicasts from it that are missing here (gaps, or announced and not received); under its
        own address, the multicasts it holds back (during a merge handshake, or MCAST's full window). The
        orchestrator's "quiet" is: nothing waited on among the running members' current addresses."""
        out: dict[str, int] = {}

        def add(peer: str, n: int) -> None:
            if n:
                out[peer] = out.get(peer, 0) + n

        mcast = self.multicast_protocol
        add(self.local, len(self._held) + (mcast.pending() if hasattr(mcast, "pending") else 0))

        for peer, entry in self.unicast.send_table.items():
            add(peer, len(entry.table))
        for peer, entry in self.unicast.recv_table.items():
            add(peer, entry.table.num_missing())
        for peer, w in getattr(mcast, "windows", {}).items():
            add(peer, w.num_missing() if hasattr(w, "num_missing") else w.table.num_missing())
        return out

    def multicast_heard(self) -> dict[str, int]:
        """Sender address -> the highest multicast seqno received from it, this member's own address -> the highest
        it sent ({} without a multicast protocol). A lost tail (no later message reveals the gap) is not in
        `waiting_on`; the orchestrator finds it by comparing what the members of a view heard with what each sent."""
        mcast = self.multicast_protocol
        if mcast is None or not hasattr(mcast, "digest"):
            return {}
        return {member: hr for member, (_, hr) in mcast.digest().items()}


def build_stack(
    local: str,
    stack: str = "unicast3",
    properties: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    cluster: str = "chaosbed",
    conn_id_start: int = 1,
    seed: int | None = None,
) -> Stack:
    """A stack by name (see STACKS) with per-protocol properties, e.g. {"unicast3": {"xmit_interval": "200ms"}}.

    `seed` drives the protocols' randomised timers (MERGE's INFO jitter): a simulator passes one from its seeded
    generator so that runs replay; None derives it from the address.
    """
    if stack not in STACKS:
        raise ValueError(f"unknown stack {stack!r}; known: {', '.join(sorted(STACKS))}")
    properties = properties or {}
    names = STACKS[stack]
    # properties of known protocols this stack lacks are ignored (one property set serves several stacks)
    unknown = set(properties) - set(PROTOCOLS) - {stack}
    if unknown:
        raise ValueError(
            f"properties for unknown protocols: {', '.join(sorted(unknown))}; known: {', '.join(PROTOCOLS)}"
        )
    ctx = _BuildContext(conn_id_start, seed)
    protocols: dict[str, Any] = {}
    for name in names:
        proto = PROTOCOLS[name](local, properties.get(name, {}), ctx)
        protocols[name] = proto
        if name in Stack.MULTICAST:
            ctx.multicast = proto
    gms = protocols.get("gms")
    if gms is not None:
        unicast = next(p for n, p in protocols.items() if n in Stack.UNICAST)
        gms.attach(
            unicast=unicast,
            multicast=ctx.multicast,
            stable=protocols.get("stable"),
            fd=protocols.get("fd"),
            merge=protocols.get("merge"),
        )
    return Stack(local, list(protocols.values()), cluster=cluster)
