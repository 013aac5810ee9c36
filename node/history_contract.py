"""The history contract, version 1 (docs/contracts/history.md): what any member writes, chaosbed's own or a foreign one,
so that the checker can check it. A machine-readable table and a validator, used by `chaosbed conform` and by the
checker for the histories of foreign systems. Standard library only.

Stricter than chaosbed's own format (node/history_format.py) where the checks need it, looser where they do not:
extra fields are allowed (ignored), the event kinds chaosbed writes besides the required ones are optional, an
unknown kind is a note (counted, not checked), never an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeGuard

VERSION = 1
ERROR, NOTE = "error", "note"


def _int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


TYPES: dict[str, Callable[[Any], bool]] = {
    "int": _int,
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "id": lambda v: isinstance(v, str) or _int(v),  # a JSON string or integer, read as its text
    "list[str]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "object": lambda v: isinstance(v, dict),
}
# field: (type, may be null)
FIELDS: dict[str, tuple[str, bool]] = {
    "t": ("int", False),
    "member": ("str", False),
    "event": ("str", False),
    "incarnation": ("int", False),
    "address": ("str", False),
    "stack": ("str", False),
    "transport": ("str", False),
    "release": ("str", False),
    "kind": ("str", False),
    "sender": ("str", False),
    "sender_address": ("str", True),
    "dest": ("str", True),
    "dest_address": ("str", True),
    "conn_id": ("id", True),
    "seqno": ("int", False),
    "msg_id": ("str", False),
    "size": ("int", False),
    "view_id": ("id", False),
    "members": ("list[str]", False),
    "merge": ("bool", False),
    "addresses": ("list[str]", False),
    "merged_from": ("list[str]", False),
    "counters": ("object", False),
    "peer": ("str", True),
    "peer_address": ("str", False),
}
COMMON = ("t", "member", "event")
MESSAGE = ("kind", "sender", "dest", "conn_id", "seqno", "msg_id", "size")
# event: (required fields besides COMMON, optional fields that are typed when present)
EVENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "start": (("incarnation",), ("address", "stack", "transport", "release")),
    "send": (MESSAGE, ("incarnation", "dest_address")),
    "deliver": (MESSAGE, ("incarnation", "sender_address")),
    "view": (("view_id", "members", "merge"), ("incarnation", "addresses", "merged_from")),
    "stop": ((), ("incarnation", "counters")),
}
REQUIRED_KINDS = ("start", "send", "deliver", "stop")  # and `view` where the system has views
# chaosbed's other kinds (node/history_format.py): allowed, not checked
OPTIONAL_KINDS = ("conn", "xmit", "ack", "stable", "sync", "suspect", "left", "merge_start", "merge_abandoned")


@dataclass(frozen=True)
class Problem:
    """One line's problem: `line` counts from 1, `field` is the field at fault (None: the whole line)."""

    line: int
    field: str | None
    reason: str
    severity: str = ERROR


def record_problems(rec: dict[str, Any], member: str) -> list[tuple[str | None, str]]:
    """(field, reason) for each way one parsed event breaks the contract; `member` is the history's owner."""
    found: list[tuple[str | None, str]] = []
    for name in COMMON:
        if name not in rec:
            found.append((name, f"no field {name!r} (every event has t, member and event)"))
    if found:
        return found
    found += _typed(rec, COMMON)
    if found:
        return found
    if rec["member"] != member:
        found.append(("member", f"{rec['member']!r} in the history of {member} (a member writes its own name)"))
    if rec["t"] < 0:
        found.append(("t", f"{rec['t']} is negative (CLOCK_MONOTONIC nanoseconds)"))
    spec = EVENTS.get(rec["event"])
    if spec is None:
        return found
    required, optional = spec
    found += [(n, f"{rec['event']} has no field {n!r}") for n in required if n not in rec]
    found += _typed(rec, tuple(n for n in (*required, *optional) if n in rec))
    if rec["event"] in ("send", "deliver") and not found:
        found += _message_problems(rec, member)
    return found


def _typed(rec: dict[str, Any], names: tuple[str, ...]) -> list[tuple[str | None, str]]:
    found: list[tuple[str | None, str]] = []
    for name in names:
        typ, nullable = FIELDS[name]
        value = rec[name]
        if value is None and not nullable:
            found.append((name, f"{rec.get('event')}: {name} is null"))
        elif value is not None and not TYPES[typ](value):
            found.append((name, f"{rec.get('event')}: {name} = {value!r:.60} is not {typ}"))
    return found


def _message_problems(rec: dict[str, Any], member: str) -> list[tuple[str | None, str]]:
    event, kind = rec["event"], rec["kind"]
    if kind not in ("unicast", "multicast"):
        return [("kind", f"{event}: kind {kind!r} is not unicast or multicast")]
    found: list[tuple[str | None, str]] = []
    if kind == "multicast" and rec["dest"] is not None:
        found.append(("dest", f"{event}: a multicast has dest null, not {rec['dest']!r}"))
    if kind == "unicast" and not rec["dest"]:
        found.append(("dest", f"{event}: a unicast names its destination"))
    if event == "send" and rec["sender"] != member:
        found.append(("sender", f"send: sender {rec['sender']!r} is not the member {member!r}"))
    if event == "deliver" and kind == "unicast" and rec["dest"] != member:
        found.append(("dest", f"deliver: dest {rec['dest']!r} is not the receiver {member!r}"))
    if rec["size"] < 0 or rec["seqno"] < 0:
        found.append(("size" if rec["size"] < 0 else "seqno", f"{event}: must be >= 0"))
    if not rec["msg_id"]:
        found.append(("msg_id", f"{event}: msg_id is empty"))
    return found


def file_problems(records: Iterable[tuple[int, dict[str, Any]]], member: str) -> list[Problem]:
    """Every problem of one history's parsed events ((line number, event) in file order): each event's own, then
    the order of incarnations: `start` first, nothing but the next incarnation's `start` after `stop`, incarnations
    counting up. Unknown kinds are notes."""
    problems: list[Problem] = []
    state = _Order()
    for line, rec in records:
        found = record_problems(rec, member)
        problems += [Problem(line, f, r) for f, r in found]
        if any(f in COMMON for f, _ in found):
            continue
        event = rec["event"]
        if event not in EVENTS and event not in OPTIONAL_KINDS:
            problems.append(Problem(line, "event", f"unknown event kind {event!r}: counted, not checked", NOTE))
        problems += [Problem(line, f, r) for f, r in state.next(rec)]
    return problems


class _Order:
    """The sequence rules of one history."""

    def __init__(self) -> None:
        self.seen_start = False
        self.stopped_at: int | None = None
        self.incarnation = 0
        self.lines = 0

    def next(self, rec: dict[str, Any]) -> list[tuple[str | None, str]]:
        self.lines += 1
        event = rec["event"]
        if event == "start":
            found: list[tuple[str | None, str]] = []
            inc = rec.get("incarnation")
            if _int(inc) and inc <= self.incarnation:
                found.append(("incarnation", f"start of incarnation {inc} after incarnation {self.incarnation}"))
            self.incarnation = inc if _int(inc) else self.incarnation + 1
            self.seen_start, self.stopped_at = True, None
            return found
        if not self.seen_start:
            self.seen_start = True  # reported once
            return [("event", f"the first event is {event!r}: a history (each incarnation) starts with `start`")]
        if self.stopped_at is not None:
            return [("event", f"{event!r} after `stop`: nothing follows stop but the next incarnation's start")]
        if event == "stop":
            self.stopped_at = self.lines
        return []
