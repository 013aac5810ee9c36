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
)


class Output(NamedTuple):
    datagrams: list[tuple[str | None, bytes]]  # (dest address or None for multicast, bytes)
    delivers: list[Delivery]
    events: list[dict[str, Any]]


def _unicast3(local: str, props: Mapping[str, Any], conn_id_start: int) -> Any:
    from node.protocols.unicast3 import Unicast3, Unicast3Props

    p = Unicast3Props()
    p.update(dict(props))
    return Unicast3(local, p, conn_id_start=conn_id_start)


def _unicast2(local: str, props: Mapping[str, Any], conn_id_start: int) -> Any:
    from node.protocols.unicast2 import Unicast2, Unicast2Props

    p = Unicast2Props()
    p.update(dict(props))
    return Unicast2(local, p, conn_id_start=conn_id_start)


# stack name -> the unicast protocol factory (multicast and membership protocols join in later stacks)
STACKS: dict[str, tuple[str, Callable[[str, Mapping[str, Any], int], Any]]] = {
    "unicast3": ("unicast3", _unicast3),
    "unicast2": ("unicast2", _unicast2),
}


class Stack:
    """One member's stack. Not thread-safe: one driver calls it.

    `protocols` are the stack's sans-IO protocols, bottom first. The stack knows three roles by protocol name:
    the unicast protocol (unicast3 | unicast2, required), the multicast protocol (nakack2 | mcast, optional) and
    membership (gms, optional); protocols that need each other get references when the stack is built
    (`build_stack`).
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
        self.max_datagram_size = max_datagram_size
        self.out = Outbox()
        self.c = dict.fromkeys(STACK_COUNTERS, 0)
        self.last_error: str | None = None

    # --- driving --------------------------------------------------------------------------------------------------

    def send(self, dest: str, payload: bytes, now: float) -> int:
        """Sends a unicast application message; returns its seqno on the connection."""
        return self.unicast.send(dest, payload, now, self.out)

    def multicast(self, payload: bytes, now: float) -> int | None:
        """Multicasts an application message to the group; returns its seqno, or None if the protocol holds it
        back for now (MCAST with a full window: it is sent, in order, once acks free space)."""
        if self.multicast_protocol is None:
            raise ValueError("this stack has no multicast protocol")
        return self.multicast_protocol.multicast(payload, now, self.out)

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
        for proto_id, msgs in batches.items():
            proto = self.protocols.get(proto_id)
            if proto is None:
                self.c["unknown_protocol_msgs"] += len(msgs)
                continue
            proto.handle(dgram.src, msgs, now, self.out)
        return True

    def tick(self, now: float) -> None:
        for proto in self.protocols.values():
            if proto.next_wakeup() <= now:
                proto.tick(now, self.out)

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


def build_stack(
    local: str,
    stack: str = "unicast3",
    properties: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    cluster: str = "chaosbed",
    conn_id_start: int = 1,
) -> Stack:
    """A stack by name (see STACKS) with per-protocol properties, e.g. {"unicast3": {"xmit_interval": "200ms"}}."""
    if stack not in STACKS:
        raise ValueError(f"unknown stack {stack!r}; known: {', '.join(sorted(STACKS))}")
    properties = properties or {}
    unknown = set(properties) - {name for name, _ in STACKS.values()} - {stack}
    if unknown:
        raise ValueError(f"properties for protocols not in stack {stack!r}: {', '.join(sorted(unknown))}")
    name, factory = STACKS[stack]
    return Stack(local, [factory(local, properties.get(name, {}), conn_id_start)], cluster=cluster)
