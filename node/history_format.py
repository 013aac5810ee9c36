"""The history format as one machine-readable table: every event kind, its fields and their JSON types, for the
members' histories (written by node/history.py) and the orchestrator's faults.jsonl (written by
orchestration/fault_log.py). docs/history.md is its prose; analysis/schema.py takes its columns (`CHECKER_COLUMNS`)
from here; tests/unit/test_history_schema.py validates every event both writers emit against it. Standard library
only (node/).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from node import fault_kinds

# JSON types: "int" (integer), "number" (int or float), "str", "bool", "id" (a JSON number or string, read by the
# checker as its text), "list[str]", "list[list[str]]", "object", "any".
_CHECKS: dict[str, Callable[[object], bool]] = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "id": lambda v: isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)),
    "list[str]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "list[list[str]]": lambda v: isinstance(v, list) and all(_CHECKS["list[str]"](x) for x in v),
    "object": lambda v: isinstance(v, dict),
    "any": lambda v: True,
}


@dataclass(frozen=True)
class Field:
    """One field: its JSON type, whether it may be null, and what it means."""

    type: str
    nullable: bool
    meaning: str


@dataclass(frozen=True)
class Kind:
    """One event kind: who writes it, the fields it always has (besides the common ones), those it may have."""

    writer: str
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()


# --- member histories: history/<member>.jsonl ----------------------------------------------------------------------

MEMBER_COMMON = ("t", "member", "incarnation", "event")
MEMBER_FIELDS: dict[str, Field] = {
    "t": Field("int", False, "ns: CLOCK_MONOTONIC of the machine, or the simulator's virtual time"),
    "member": Field("str", False, "the member writing the event (for deliver: the receiver)"),
    "incarnation": Field("int", False, "1, then +1 per restart of the member"),
    "event": Field("str", False, "the event kind"),
    "address": Field("str", False, 'start: the incarnation\'s address ("B", "B/2" after one restart)'),
    "stack": Field("str", False, "start: the stack's name"),
    "transport": Field("str", False, "start: udp | tcp"),
    "release": Field("str", False, 'start: the release of a real system the member runs ("5.5.6")'),
    "kind": Field("str", False, "send/deliver: unicast | multicast"),
    "sender": Field("str", False, "send/deliver: the sending member; nakack2's xmit: whose messages are resent"),
    "sender_address": Field("str", False, "deliver: the sending incarnation's address"),
    "dest": Field("str", True, "send/deliver: the unicast destination; null for multicast"),
    "dest_address": Field("str", True, "send: the address of the incarnation a unicast went to; null for multicast"),
    "conn_id": Field("id", True, "the unicast connection id; null for multicast"),
    "seqno": Field("int", False, "unicast: seqno in the connection; multicast: the sender's multicast seqno"),
    "msg_id": Field("str", True, "send/deliver: unique per run; the checker joins deliveries to sends on it"),
    "size": Field("int", False, "send/deliver: payload bytes"),
    "view_id": Field("str", False, "view: the view's id"),
    "members": Field("list[str]", False, "view: the members' names, coordinator first"),
    "merge": Field("bool", False, "view: installed by a merge"),
    "addresses": Field("list[str]", False, "view: the members' addresses (incarnations)"),
    "merged_from": Field("list[str]", False, "view: the ids of the views a merge view merged ([] otherwise)"),
    "peer": Field("str", True, "the other member (a name, never an address); xmit: null when resent by multicast"),
    "peer_address": Field("str", False, 'suspect: the suspected incarnation\'s address ("B/2"), where known'),
    "side": Field("str", False, "conn: send | recv"),
    "state": Field("str", False, "conn: open | closing | closed | removed"),
    "merge_id": Field("int", False, "merge_start/merge_abandoned: the merge round's id"),
    "reps": Field("list[str]", False, "merge_start: the other subgroups' representatives"),
    "counters": Field("object", False, "stop: the stack's counters per protocol (a real member adds runtime ones)"),
}
H, P = "node/history.py", "node/history.py (from a protocol's events)"
MEMBER_EVENTS: dict[str, Kind] = {
    "start": Kind(H, ("address", "stack", "transport"), ("release",)),
    "send": Kind(H, ("kind", "sender", "dest", "dest_address", "conn_id", "seqno", "msg_id", "size")),
    "deliver": Kind(H, ("kind", "sender", "sender_address", "dest", "conn_id", "seqno", "msg_id", "size")),
    "view": Kind(P, ("view_id", "members", "merge", "addresses", "merged_from")),
    "conn": Kind(P, ("peer", "conn_id", "side", "state")),
    "xmit": Kind(P, ("peer", "seqno"), ("conn_id", "sender")),
    "ack": Kind(P, ("peer", "conn_id", "seqno")),
    "stable": Kind(P, ("peer", "conn_id", "seqno")),
    "sync": Kind(P, ("peer", "conn_id")),
    "suspect": Kind(P, ("peer",), ("peer_address",)),
    "left": Kind(P, ()),
    "merge_start": Kind(P, ("merge_id", "reps")),
    "merge_abandoned": Kind(P, ("merge_id",)),
    "stop": Kind(H, ("counters",)),
}
# The columns of analysis/schema.py, in its order: the fields the checker reads (any event may leave one out).
CHECKER_COLUMNS = (
    "t",
    "member",
    "event",
    "kind",
    "sender",
    "dest",
    "dest_address",
    "conn_id",
    "seqno",
    "msg_id",
    "size",
    "view_id",
    "members",
    "merge",
    "peer",
    "state",
)

# --- the orchestrator's faults.jsonl -------------------------------------------------------------------------------

FAULT_FIELDS: dict[str, Field] = {
    "t": Field("int", False, "ns, on the histories' clock: when the fault took effect"),
    "event": Field("str", False, "start | fault"),
    "seed": Field("int", False, "the run's seed"),
    "backend": Field("str", False, "start: sim | process | netns | docker | swarm"),
    "clocks": Field("object", False, "start, swarm: each host's clock against the orchestrator's (offset_ns, ...)"),
    "kind": Field("str", False, "fault: the fault kind (FAULT_KINDS)"),
    "id": Field("str", False, "a network fault's id (f1, f2, ...), named by a partial heal's `faults`"),
    "at": Field("str", False, 'a scheduled fault: its planned offset from the start line\'s t ("1.5s")'),
    "for": Field("str", False, 'how long the fault lasts ("2s"); its heal is a later line'),
    "late": Field("bool", False, "a member action that started more than 20 ms after its instant"),
    "lag_ms": Field("number", False, "with late: how late, in ms"),
    "observed_t": Field("int", False, "a probe run: when probes saw the network fault take effect (first one dropped)"),
    "nemesis": Field("int", False, "made by the scenario's [[nemesis]] entry with this index (0-based)"),
    "round": Field("int", False, "with nemesis: the entry's round (1-based) the fault belongs to"),
    "from": Field("list[str]", False, "the sending members of the links"),
    "to": Field("list[str]", False, "the receiving members of the links"),
    "one_way": Field("bool", False, "partition: only from -> to"),
    "groups": Field("list[list[str]]", False, "split: the groups that no longer hear each other"),
    "probability": Field("number", False, "loss/reorder/duplicate/discard: per packet or message, 0..1"),
    "delay": Field("str", False, 'delay/discard: the added delay ("30ms")'),
    "jitter": Field("str", False, 'delay: the jitter ("5ms")'),
    "match": Field("str", False, 'discard: the message rule ("UNICAST3.ACK(seqno=50)")'),
    "action": Field("str", False, "discard: drop | delay | duplicate | reorder"),
    "count": Field("int", False, "discard: act on this many matching messages"),
    "faults": Field("list[str]", False, "heal: the ids healed (absent: every fault)"),
    "member": Field("str", False, "a member action's member"),
    "peer": Field("str", False, "close-connection: the peer whose connection is closed"),
    "property": Field("str", False, 'set: "protocol.property"'),
    "value": Field("any", False, "set: the new value"),
}
FAULT_KINDS = tuple(fault_kinds.KINDS)  # node/fault_kinds.py
_NOT_COMMON = tuple(f for f in FAULT_FIELDS if f not in ("t", "event", "seed", "kind", "backend", "clocks"))
FAULT_EVENTS: dict[str, Kind] = {
    "start": Kind("orchestration/schedule.py (pytest_plugin.py)", ("t", "seed", "backend"), ("clocks",)),
    "fault": Kind("orchestration/ (orchestration/fault_log.py)", ("t", "seed", "kind"), _NOT_COMMON),
}


def member_problems(record: Mapping[str, object]) -> list[str]:
    """What is wrong with one member history event (nothing: []): an undocumented kind or field, a missing field,
    a value of the wrong type."""
    event = record.get("event")
    kind = MEMBER_EVENTS.get(event) if isinstance(event, str) else None
    if kind is None:
        return [f"undocumented event kind {record.get('event')!r}"]
    return _problems(record, MEMBER_COMMON + kind.required, kind.optional, MEMBER_FIELDS)


def fault_problems(record: Mapping[str, object]) -> list[str]:
    """What is wrong with one faults.jsonl line (nothing: [])."""
    event = record.get("event")
    kind = FAULT_EVENTS.get(event) if isinstance(event, str) else None
    if kind is None:
        return [f"undocumented faults.jsonl event {record.get('event')!r}"]
    found = _problems(record, ("event", *kind.required), kind.optional, FAULT_FIELDS)
    if record.get("event") == "fault" and record.get("kind") not in FAULT_KINDS:
        found.append(f"undocumented fault kind {record.get('kind')!r}")
    return found


def _problems(
    record: Mapping[str, object], required: tuple[str, ...], optional: tuple[str, ...], fields: dict[str, Field]
) -> list[str]:
    what = record.get("event")
    found = [f"{what}: no field {name!r}" for name in required if name not in record]
    for name, value in record.items():
        if name not in required and name not in optional:
            found.append(f"{what}: undocumented field {name!r}")
            continue
        f = fields[name]
        if value is None and not f.nullable:
            found.append(f"{what}: {name} is null")
        elif value is not None and not _CHECKS[f.type](value):
            found.append(f"{what}: {name} = {value!r} is not {f.type}")
    return found
