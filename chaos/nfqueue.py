"""Stateful chaos on NFQUEUE: count rules ("drop the 50th ACK once"), message stripping inside a batch, and userspace
delay / duplicate / reorder where the kernel has no netem. One handler process runs in ONE member's network
namespace (the receiver, DESIGN principle 4) and judges the packets that iptables rules queue to it::

    ip netns exec <member-ns> python -m chaos.nfqueue --queue N --control SOCKET [--max-len M] [--local-ip IP] [--tag T]
    ip netns exec <member-ns> iptables -A INPUT -s <peer> -j NFQUEUE --queue-num N --queue-bypass

Startup prints one JSON line, ``{"ready": true, "queue": N, "pid": PID, "fail_open": true}``, or
``{"ready": false, "error": "..."}`` and exits 2. Control: JSON lines over the unix stream socket SOCKET, one reply
line per request: ``{"cmd": "rules", "rules": [...]}``, ``{"cmd": "stats"}``, ``{"cmd": "stop"}`` (see `Handler`).
SIGTERM/SIGINT behave like stop. A rule (see `compile_rule`)::

    {"id": "r1", "sources": ["10.1.2.11"], "match": "UNICAST3.ACK(seqno=50)" | null,
     "action": "drop" | "delay" | "duplicate" | "reorder", "probability": 1.0, "count": null,
     "delay_ms": 0, "jitter_ms": 0, "seed": 0, "active_from_ns": null, "active_until_ns": null}

A rule with `active_from_ns` / `active_until_ns` (CLOCK_MONOTONIC nanoseconds, time.monotonic_ns(), one clock for
every namespace; null = unbounded) acts only for active_from_ns <= now < active_until_ns, `now` being when the
handler judges the packet: a scheduled fault is installed ahead of time and switches itself on and off at its
planned instants, with no request then. Outside its window a rule neither matches nor counts. A link drop rule
(match null) with a window is a timed partition of that source, for systems without nft time gates
(chaos/kernel.py `time_gates`).

Why this module talks netlink itself instead of using NetfilterQueue 1.1 (checked against its _impl.pyx and on this
kernel): late verdicts work there (``retain()``, then ``accept()`` after the callback returned, also after
``set_payload``), but (1) it clamps the copy range to 4016 bytes (its recv buffer is 4096 bytes), so a member's
bundled datagram (up to 60,000 bytes, node/stack.py) arrives truncated and cannot be parsed, stripped or
duplicated; (2) it has no way to set the queue flags, so no fail-open. The NFQUEUE netlink protocol is small
(config, packet, verdict, batch verdict messages), so this module speaks it with struct on a plain
``socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER)``: full copy range (the kernel caps it at 65531 bytes; longer
packets arrive truncated, are detected and accepted untouched), a socket receive buffer sized from max_len, and
NFQA_CFG_F_FAIL_OPEN: when the queue is full (or our socket buffer is), the kernel ACCEPTS the packet instead of
dropping it -- those packets escape the rules, but nothing is lost that no rule dropped. Kernel counters from
/proc/net/netfilter/nfnetlink_queue are in the stats (queue_dropped / queue_user_dropped stay 0 with fail-open).
The kernel counts no packet that bypassed a full queue; one that overflowed our socket buffer shows in
`missed_ids`. Compare `packets` with what the receiver got to see the bypass share (bench/bench_nfqueue.py does).
On kernels without fail-open (before 3.6) the handler still runs, reports ``"fail_open": false`` and relies on
--max-len sizing (`default_max_len`); a full queue then drops (queue_dropped).

Stopping never loses a packet the rules did not drop: the handler first sets the queue length to 0 (with fail-open
every new packet then bypasses the queue), accepts every held packet and every packet still queued, and only then
unbinds (the kernel drops whatever is still queued at unbind).

Packets are parsed with struct and node/wire.py's table (never scapy): per rule the (proto, type) ids and the
(offset, unpack, lo, hi) field tests are precomputed, so matching a message costs a few unpack_from calls.
Duplicated copies are sent from sockets with SO_MARK = DUP_MARK; the handler accepts marked packets untouched, so
a copy is never judged (or duplicated) again, even by a rule with no sources.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import heapq
import ipaddress
import json
import math
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from chaos.rules import Match, RuleError, parse_match
from node import wire

DEFAULT_MAX_LEN = 4096
MAX_MAX_LEN = 65535
REORDER_MAX_HOLD = 0.100  # seconds a reordered packet waits for the next packet of its source
DUP_MARK = 0xCB0D  # SO_MARK of injected duplicates: the handler accepts them untouched
COPY_RANGE = 0xFFFF  # the kernel clamps this to 65531 (0xFFFF - NLA_HDRLEN)
MAX_CONTROL_LINE = 1 << 20

# Verdict kinds returned by Engine.judge.
ACCEPT, DROP, DELAY, DUPLICATE, REORDER = range(5)
ACTIONS = {"drop": DROP, "delay": DELAY, "duplicate": DUPLICATE, "reorder": REORDER}

# --- the wire format, for skipping messages ------------------------------------------------------------------------

_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_MAGIC, _VERSION = wire.MAGIC, wire.WIRE_VERSION


def _skip_str(buf: bytes, pos: int) -> int:
    if pos >= len(buf):
        raise wire.WireError("truncated string length")
    end = pos + 1 + buf[pos]
    if end > len(buf):
        raise wire.WireError("truncated string")
    return end


def _skip_ranges(buf: bytes, pos: int) -> int:
    if pos + 2 > len(buf):
        raise wire.WireError("truncated range count")
    end = pos + 2 + 16 * _U16.unpack_from(buf, pos)[0]
    if end > len(buf):
        raise wire.WireError("truncated ranges")
    return end


def _decoder_skip(kind: str) -> Callable[[bytes, int], int]:
    decode = wire._DECODERS[kind]  # rare kinds (views, digests): wire.py's own codec is the reference

    def skip(buf: bytes, pos: int) -> int:
        return decode(buf, pos)[1]

    return skip


_SKIPPERS: dict[str, Callable[[bytes, int], int]] = {
    kind: {"str": _skip_str, "ranges": _skip_ranges}.get(kind) or _decoder_skip(kind) for kind in wire.VARIABLE_KINDS
}
# (proto << 8 | type) -> (size of proto+type+fixed fields, skip functions of the variable-size fields)
_PLANS: dict[int, tuple[int, tuple[Callable[[bytes, int], int], ...]]] = {
    (s.proto_id << 8) | s.type_id: (s.fixed.size, tuple(_SKIPPERS[f.kind] for f in s.variable))
    for s in wire.SPECS.values()
}

Span = tuple[int, int, int, int]  # (start, end, proto id, type id) of one message


def _spans(buf: bytes, pos: int) -> tuple[int, list[Span]]:
    """Message spans of the datagram that starts at buf[pos] and ends at the end of buf (positions absolute)."""
    end = len(buf)
    if pos + 6 > end or buf[pos] != _MAGIC or buf[pos + 1] != _VERSION:
        raise wire.WireError("not a chaosbed datagram")
    p = pos + 3
    for _ in range(3):  # cluster, src, dest
        if p >= end:
            raise wire.WireError("truncated datagram header")
        p += 1 + buf[p]
    if p + 2 > end:
        raise wire.WireError("truncated message count")
    count = (buf[p] << 8) | buf[p + 1]
    p += 2
    if count == 0:
        raise wire.WireError("datagram with no messages")
    head = p
    spans: list[Span] = []
    plans = _PLANS
    for _ in range(count):
        if p + 2 > end:
            raise wire.WireError("truncated message header")
        proto, typ = buf[p], buf[p + 1]
        plan = plans.get((proto << 8) | typ)
        if plan is None:
            raise wire.WireError(f"unknown protocol/header type {proto}/{typ}")
        q = p + plan[0]
        for skip in plan[1]:
            q = skip(buf, q)
        if q + 4 > end:
            raise wire.WireError("truncated message")
        q += 4 + _U32.unpack_from(buf, q)[0]
        if q > end:
            raise wire.WireError("truncated payload")
        spans.append((p, q, proto, typ))
        p = q
    if p != end:
        raise wire.WireError(f"{end - p} trailing bytes after {count} messages")
    return head, spans


def datagram_spans(udp_payload: bytes) -> tuple[int, list[Span]]:
    """(head_len, [(start, end, proto id, type id), ...]) of one datagram: head_len is where the first message
    starts (after the u16 count); each message is udp_payload[start:end]. Raises wire.WireError if malformed."""
    return _spans(bytes(udp_payload), 0)


# --- IPv4 / UDP ----------------------------------------------------------------------------------------------------

_IP_WORDS = struct.Struct("!10H")
_UDP = struct.Struct("!HHHH")
_IP_UDP = 28  # IPv4 header without options + UDP header


def ip_checksum(header: bytes) -> int:
    """The IPv4 header checksum of a 20-byte header whose checksum field is zero."""
    s = sum(_IP_WORDS.unpack(header))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _parse_udp(pkt: bytes) -> tuple[int, list[Span]] | None:
    """Spans (absolute in pkt) of our datagram in an IPv4/UDP packet without options, or None."""
    n = len(pkt)
    if n < _IP_UDP + 6 or pkt[0] != 0x45 or pkt[9] != 17:
        return None
    if (
        _U16.unpack_from(pkt, 2)[0] != n
        or _U16.unpack_from(pkt, 6)[0] & 0x3FFF
        or _U16.unpack_from(pkt, 24)[0] != n - 20
    ):
        return None  # truncated copy, a fragment, or inconsistent lengths
    try:
        return _spans(pkt, _IP_UDP)
    except wire.WireError:
        return None


def _rebuild(pkt: bytes, head: int, kept: Sequence[Span]) -> bytes:
    body = b"".join([pkt[_IP_UDP : head - 2], _U16.pack(len(kept)), *[pkt[s:e] for s, e, _, _ in kept]])
    ip = bytearray(pkt[:20])
    ip[2:4] = _U16.pack(_IP_UDP + len(body))
    ip[10:12] = b"\0\0"
    ip[10:12] = _U16.pack(ip_checksum(ip))
    sport, dport = struct.unpack_from("!HH", pkt, 20)
    return b"".join([ip, _UDP.pack(sport, dport, 8 + len(body), 0), body])


def strip_messages(ip_packet: bytes, head_len: int, keep_spans: Sequence[Span]) -> bytes:
    """The IPv4/UDP packet rebuilt with only `keep_spans` (as returned by datagram_spans of its UDP payload, in
    order): message count fixed, IP total length and header checksum recomputed, UDP length fixed, UDP checksum 0
    (none). The packet must have no IP options."""
    if ip_packet[0] != 0x45:
        raise ValueError("only IPv4 packets without options can be rewritten")
    if not keep_spans:
        raise ValueError("no message left: drop the packet instead")
    return _rebuild(ip_packet, head_len + _IP_UDP, [(s + _IP_UDP, e + _IP_UDP, p, t) for s, e, p, t in keep_spans])


# --- rules ---------------------------------------------------------------------------------------------------------


class RuleValidationError(ValueError):
    """A rule that cannot be compiled; the message names the rule id, the field and the reason."""


_RULE_KEYS = {
    "id",
    "sources",
    "match",
    "action",
    "probability",
    "count",
    "delay_ms",
    "jitter_ms",
    "seed",
    "active_from_ns",
    "active_until_ns",
}
_STRUCT_OF_KIND = {k: struct.Struct("!" + c) for k, c in wire.FIXED_KINDS.items()}
_FIELD_MAX = {"u8": 0xFF, "u16": 0xFFFF, "u32": 0xFFFFFFFF, "u64": (1 << 64) - 1, "bool": 1}


class Rule:
    """A compiled rule plus its state (counters, remaining count, random generator)."""

    __slots__ = (
        "action",
        "active_from",
        "active_until",
        "count",
        "delay_ms",
        "delayed",
        "dropped",
        "duplicated",
        "id",
        "jitter_ms",
        "kind",
        "match",
        "matched",
        "probability",
        "remaining",
        "reordered",
        "rng",
        "seed",
        "sources",
        "spec",
        "tests",
        "type_key",
    )

    def __init__(self, spec: dict[str, Any], match: Match | None, sources: frozenset[bytes]) -> None:
        self.spec = spec
        self.id: str = spec["id"]
        self.sources = sources
        self.match = match
        self.action: str = spec["action"]
        self.kind = ACTIONS[self.action]
        self.probability: float = spec["probability"]
        self.count: int | None = spec["count"]
        self.delay_ms: float = spec["delay_ms"]
        self.jitter_ms: float = spec["jitter_ms"]
        self.seed: int = spec["seed"]
        # The window, CLOCK_MONOTONIC ns: None = unbounded (kept as None so untimed rules cost nothing).
        self.active_from: int | None = spec.get("active_from_ns")
        self.active_until: int | None = spec.get("active_until_ns")
        self.type_key = -1  # link rule
        self.tests: tuple[tuple[int, Callable[..., tuple[Any, ...]], int, int], ...] = ()
        if match is not None:
            hs = wire.SPECS[f"{match.protocol}.{match.header}"]
            self.type_key = (hs.proto_id << 8) | hs.type_id
            offsets, off = {}, 2
            for f in hs.fields:
                if f.kind not in wire.FIXED_KINDS:
                    break
                offsets[f.name] = (off, f.kind)
                off += _STRUCT_OF_KIND[f.kind].size
            tests = []
            for name, value in match.fields:
                o, kind = offsets[name]
                lo, hi = value if isinstance(value, tuple) else (value, value)
                tests.append((o, _STRUCT_OF_KIND[kind].unpack_from, lo, hi))
            self.tests = tuple(tests)
        self.reset()

    def reset(self) -> None:
        self.matched = self.dropped = self.delayed = self.duplicated = self.reordered = 0
        self.remaining = self.count
        self.rng = random.Random(self.seed)

    @property
    def link(self) -> bool:
        return self.match is None

    @property
    def timed(self) -> bool:
        return self.active_from is not None or self.active_until is not None

    def active(self, now_ns: int) -> bool:
        """Whether the rule acts at now_ns (CLOCK_MONOTONIC ns): active_from_ns <= now < active_until_ns."""
        return (self.active_from is None or self.active_from <= now_ns) and (
            self.active_until is None or now_ns < self.active_until
        )

    def fires(self) -> bool:
        """Whether a match is acted on: count left, and the rule's own random draw says so."""
        return self.remaining != 0 and (self.probability >= 1.0 or self.rng.random() < self.probability)

    def spend(self) -> None:
        """One action taken: one less of `count`."""
        if self.remaining is not None:
            self.remaining -= 1

    def inherit(self, old: Rule) -> None:
        """Keeps the counters of the rule this one replaces (same id), and its remaining count and random sequence
        unless `count` / `seed` changed."""
        self.matched, self.dropped, self.delayed = old.matched, old.dropped, old.delayed
        self.duplicated, self.reordered = old.duplicated, old.reordered
        if self.count == old.count:
            self.remaining = old.remaining
        if self.seed == old.seed:
            self.rng = old.rng

    def matches(self, buf: bytes, span: Span) -> bool:
        """True if the message at span is this rule's header type with every field equal / in range."""
        start = span[0]
        if (span[2] << 8) | span[3] != self.type_key:
            return False
        for off, unpack, lo, hi in self.tests:
            v = unpack(buf, start + off)[0]
            if v < lo or v > hi:
                return False
        return True

    def stats(self) -> dict[str, int]:
        return {
            "matched": self.matched,
            "dropped": self.dropped,
            "delayed": self.delayed,
            "duplicated": self.duplicated,
            "reordered": self.reordered,
        }

    def __repr__(self) -> str:
        return f"Rule({self.spec!r})"


def _number(rid: str, name: str, value: Any, *, lo: float = 0.0, hi: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise RuleValidationError(f"rule {rid!r}: {name} must be a number, not {value!r}")
    if not lo <= value <= hi:
        raise RuleValidationError(f"rule {rid!r}: {name} must be in [{lo}, {hi}], not {value!r}")
    return float(value)


def compile_rule(spec: Any) -> Rule:
    """Validates one rule dict and compiles it. Raises RuleValidationError naming the rule id, field and reason."""
    if not isinstance(spec, dict):
        raise RuleValidationError(f"a rule is a JSON object, not {type(spec).__name__}")
    rid = spec.get("id")
    if not isinstance(rid, str) or not rid:
        raise RuleValidationError(f"rule {rid!r}: id must be a non-empty string")
    unknown = set(spec) - _RULE_KEYS
    if unknown:
        raise RuleValidationError(f"rule {rid!r}: unknown field(s) {sorted(unknown)}; known: {sorted(_RULE_KEYS)}")
    sources = spec.get("sources") or []
    if not isinstance(sources, list):
        raise RuleValidationError(f"rule {rid!r}: sources must be a list of IPv4 addresses, not {sources!r}")
    packed = set()
    for s in sources:
        try:
            packed.add(ipaddress.IPv4Address(s).packed)
        except (ValueError, TypeError):
            raise RuleValidationError(f"rule {rid!r}: sources: {s!r} is not an IPv4 address") from None
    raw_match = spec.get("match")
    match = None
    if raw_match is not None:
        if not isinstance(raw_match, str):
            raise RuleValidationError(f"rule {rid!r}: match must be a string like UNICAST3.ACK(seqno=50) or null")
        try:
            match = parse_match(raw_match)
        except RuleError as e:
            raise RuleValidationError(f"rule {rid!r}: match: {e}") from None
        kinds = {f.name: f.kind for f in wire.SPECS[f"{match.protocol}.{match.header}"].fields}
        for name, value in match.fields:
            lo, hi = value if isinstance(value, tuple) else (value, value)
            if lo < 0 or hi > _FIELD_MAX[kinds[name]]:
                raise RuleValidationError(f"rule {rid!r}: match: {name}={value} is outside a {kinds[name]} field")
    action = spec.get("action")
    if action not in ACTIONS:
        raise RuleValidationError(f"rule {rid!r}: action must be one of {sorted(ACTIONS)}, not {action!r}")
    probability = _number(rid, "probability", spec.get("probability", 1.0), hi=1.0)
    count = spec.get("count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise RuleValidationError(f"rule {rid!r}: count must be null or an integer >= 0, not {count!r}")
    delay_ms = _number(rid, "delay_ms", spec.get("delay_ms", 0), hi=3_600_000)
    jitter_ms = _number(rid, "jitter_ms", spec.get("jitter_ms", 0), hi=3_600_000)
    if action != "delay" and (delay_ms or jitter_ms):
        raise RuleValidationError(f"rule {rid!r}: delay_ms/jitter_ms only apply to action 'delay', not {action!r}")
    seed = spec.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise RuleValidationError(f"rule {rid!r}: seed must be an integer, not {seed!r}")
    active_from = _instant(rid, "active_from_ns", spec.get("active_from_ns"))
    active_until = _instant(rid, "active_until_ns", spec.get("active_until_ns"))
    if active_from is not None and active_until is not None and active_until < active_from:
        raise RuleValidationError(
            f"rule {rid!r}: active_until_ns ({active_until}) must not be before active_from_ns ({active_from})"
        )
    clean = {
        "id": rid,
        "sources": list(sources),
        "match": raw_match,
        "action": action,
        "probability": probability,
        "count": count,
        "delay_ms": delay_ms,
        "jitter_ms": jitter_ms,
        "seed": seed,
        "active_from_ns": active_from,
        "active_until_ns": active_until,
    }
    return Rule(clean, match, frozenset(packed))


def _instant(rid: str, name: str, value: Any) -> int | None:
    """A window bound: null, or CLOCK_MONOTONIC nanoseconds (an integer >= 0)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RuleValidationError(
            f"rule {rid!r}: {name} must be null or CLOCK_MONOTONIC nanoseconds (an integer >= 0), not {value!r}"
        )
    return value


def compile_rules(specs: Any) -> list[Rule]:
    if not isinstance(specs, list):
        raise RuleValidationError(f"rules must be a list, not {type(specs).__name__}")
    rules = [compile_rule(s) for s in specs]
    ids = [r.id for r in rules]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise RuleValidationError(f"rule {dup[0]!r}: id: used by more than one rule")
    return rules


def default_max_len(rate_pps: float, delay_ms: float, jitter_ms: float = 0.0) -> int:
    """The --max-len for a link of `rate_pps` packets/s delayed by delay_ms +- jitter_ms.

    Every packet waiting for its verdict occupies a queue slot, and a delayed packet waits up to delay + jitter, so
    in steady state rate x (delay + jitter) slots are in use; x2 leaves room for bursts. The floor of 4096 covers
    un-delayed traffic while the handler lags behind (a few ms at tens of thousands of packets/s). The cap of
    65535 bounds memory: the kernel keeps every queued packet (~2-4 KB each with its skb, up to ~60 KB for a big
    bundle) and the handler's socket buffer is sized from max_len. With fail-open (see the module docstring) an
    undersized queue lets packets bypass the rules rather than drops them."""
    need = math.ceil(max(rate_pps, 0.0) * max(delay_ms + jitter_ms, 0.0) / 1000.0 * 2)
    return max(DEFAULT_MAX_LEN, min(MAX_MAX_LEN, need))


# --- the pure judge ------------------------------------------------------------------------------------------------

Judgement = tuple[int, bytes | None, float]  # (ACCEPT|DROP|DELAY|DUPLICATE|REORDER, new packet or None, delay s)
_ACCEPTED: Judgement = (ACCEPT, None, 0.0)
_DROPPED: Judgement = (DROP, None, 0.0)


class Engine:
    """The rules and their state; judges one IP packet at a time, without any I/O (the handler does the verdicts).

    Semantics: drop rules first (in list order): a link drop drops the packet; a message drop removes its matching
    messages (count and probability per matching message; a packet left with no message is dropped, otherwise it is
    rewritten). Then the first delay/duplicate/reorder rule that triggers decides the release: a link rule draws
    per packet; a message rule draws per matching message, in order, until one triggers (that message uses one unit
    of count, the datagram counts once in delayed/duplicated/reordered). `matched` counts every matching message
    (packet, for link rules) a rule saw, also after its count ran out. Message rules skip what they cannot parse
    (counted once per packet in `unparsed`); link rules apply to every IPv4 packet. A rule with a window
    (active_from_ns / active_until_ns) takes part only while judge's `now_ns` is inside it: before and after, it
    neither matches nor counts nor draws, so its count starts when it becomes active."""

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self.rules: list[Rule] = []
        self.drop_rules: list[Rule] = []  # the drop rules active in [_valid_from, _valid_until)
        self.release_rules: list[Rule] = []  # the other rules active then
        self.timed = False  # whether any rule has a window (else judge never reads the clock)
        self._valid_from = self._valid_until = 0
        self.unparsed = 0
        self.rewritten = 0
        self.set_rules(list(rules))

    def set_rules(self, rules: list[Rule]) -> None:
        old = {r.id: r for r in self.rules}
        for r in rules:
            if r.id in old and old[r.id] is not r:
                r.inherit(old[r.id])
        self.rules = rules
        self.timed = any(r.timed for r in rules)
        if self.timed:
            self._valid_from = self._valid_until = 0  # empty span: the next judge() selects the active rules
            self.drop_rules, self.release_rules = [], []
        else:
            self._select(None)

    def _select(self, now_ns: int | None) -> None:
        """The rules active at now_ns (every rule if None), and the span of instants around now_ns in which that set
        stays the same: [the last window boundary <= now_ns, the next one > now_ns)."""
        active = self.rules if now_ns is None else [r for r in self.rules if r.active(now_ns)]
        self.drop_rules = [r for r in active if r.kind == DROP]
        self.release_rules = [r for r in active if r.kind != DROP]
        if now_ns is None:
            return
        lo, hi = -(1 << 127), 1 << 127
        for r in self.rules:
            for edge in (r.active_from, r.active_until):
                if edge is None:
                    continue
                if edge <= now_ns:
                    lo = max(lo, edge)
                else:
                    hi = min(hi, edge)
        self._valid_from, self._valid_until = lo, hi

    def active_rules(self, now_ns: int | None = None) -> list[Rule]:
        """The rules that act at now_ns (default: now), in list order."""
        if now_ns is None:
            now_ns = time.monotonic_ns()
        return [r for r in self.rules if r.active(now_ns)]

    def _parse(self, pkt: bytes) -> tuple[int, list[Span]] | None:
        """The datagram's head length and message spans, or None (counted as unparsed: it passes untouched)."""
        parsed = _parse_udp(pkt)
        if parsed is None:
            self.unparsed += 1
        return parsed

    def judge(self, pkt: bytes, now_ns: int | None = None) -> Judgement:
        """The verdict on one IPv4 packet by the rules active at now_ns (CLOCK_MONOTONIC ns; None: now, read only if
        some rule has a window). The active set is recomputed only when now_ns leaves the span it was computed for."""
        if self.timed:
            if now_ns is None:
                now_ns = time.monotonic_ns()
            if not self._valid_from <= now_ns < self._valid_until:
                self._select(now_ns)
        if not self.drop_rules and not self.release_rules:
            return _ACCEPTED
        if len(pkt) < 20 or pkt[0] >> 4 != 4:
            self.unparsed += 1
            return _ACCEPTED
        src = pkt[12:16]
        parsed: tuple[int, list[Span]] | None = None
        tried = False
        kept: list[Span] | None = None
        changed = False
        for r in self.drop_rules:
            if r.sources and src not in r.sources:
                continue
            if r.type_key < 0:
                r.matched += 1
                if r.fires():
                    r.dropped += 1
                    r.spend()
                    return _DROPPED
                continue
            if not tried:
                tried, parsed = True, self._parse(pkt)
                kept = parsed[1] if parsed is not None else None
            if kept is None:
                continue
            new_kept = []
            for sp in kept:
                if (sp[2] << 8) | sp[3] == r.type_key and r.matches(pkt, sp):
                    r.matched += 1
                    if r.fires():
                        r.dropped += 1
                        r.spend()
                        changed = True
                        continue
                new_kept.append(sp)
            kept = new_kept
            if not kept:
                return _DROPPED
        out: bytes | None = None
        if changed:
            assert parsed is not None and kept is not None
            out = _rebuild(pkt, parsed[0], kept)
            self.rewritten += 1
        for r in self.release_rules:
            if r.sources and src not in r.sources:
                continue
            hit = False
            if r.type_key < 0:
                r.matched += 1
                hit = r.fires()
            else:
                if not tried:
                    tried, parsed = True, self._parse(pkt)
                    kept = parsed[1] if parsed is not None else None
                if kept is None:
                    continue
                for sp in kept:
                    if (sp[2] << 8) | sp[3] == r.type_key and r.matches(pkt, sp):
                        r.matched += 1
                        if not hit and r.fires():
                            hit = True
            if not hit:
                continue
            r.spend()
            kind = r.kind
            if kind == DELAY:
                r.delayed += 1
                d = r.delay_ms
                if r.jitter_ms:
                    d += r.rng.uniform(-r.jitter_ms, r.jitter_ms)
                return (DELAY, out, max(d, 0.0) / 1000.0)
            if kind == DUPLICATE:
                r.duplicated += 1
            else:
                r.reordered += 1
            return (kind, out, 0.0)
        return (ACCEPT, out, 0.0)

    def rule_stats(self) -> dict[str, dict[str, int]]:
        return {r.id: r.stats() for r in self.rules}


# --- the kernel queue over netlink ---------------------------------------------------------------------------------

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
SO_RCVBUFFORCE = 33
SO_MARK = getattr(socket, "SO_MARK", 36)
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
_SUBSYS_QUEUE = 3 << 8
MSG_PACKET, MSG_VERDICT, MSG_CONFIG, MSG_VERDICT_BATCH = (_SUBSYS_QUEUE | t for t in range(4))
NFQA_PACKET_HDR, NFQA_VERDICT_HDR, NFQA_MARK, NFQA_PAYLOAD = 1, 2, 3, 10
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
CMD_BIND, CMD_UNBIND = 1, 2
COPY_PACKET = 2
F_FAIL_OPEN = 1
NF_DROP, NF_ACCEPT = 0, 1

_NLH = struct.Struct("=IHHII")
_NLH_HEAD = struct.Struct("=IH")
_NLA = struct.Struct("=HH")
_ERRNO = struct.Struct("=i")
_BE32 = struct.Struct("!I")
_VERDICT = struct.Struct("!II")


class QueueError(OSError):
    """The queue could not be bound or configured; str() says what is missing and what to do."""


def _attr(kind: int, data: bytes) -> bytes:
    return _NLA.pack(4 + len(data), kind) + data + b"\0" * (-len(data) % 4)


def _bind_hint(err: int, queue: int) -> str:
    if err in (errno.EPERM, errno.EACCES) and os.geteuid() != 0:
        return "binding an NFQUEUE needs root (CAP_NET_ADMIN in the namespace): run the handler as root"
    if err in (errno.EPERM, errno.EBUSY):  # the kernel says EPERM when another socket owns the queue
        return (
            f"queue {queue} is already bound by another process in this namespace: stop it "
            "(see /proc/net/netfilter/nfnetlink_queue, column 2 is its netlink port id) or use another --queue"
        )
    if err in (errno.EPROTONOSUPPORT, errno.ENOENT, errno.EOPNOTSUPP, errno.EINVAL, errno.ENODEV):
        return (
            "this kernel has no NFQUEUE support (nfnetlink_queue): `modprobe nfnetlink_queue`, or build with "
            "CONFIG_NETFILTER_NETLINK_QUEUE"
        )
    return "see the kernel log (dmesg)"


class KernelQueue:
    """One NFQUEUE bound over a raw nfnetlink socket: config, packet reception and (batch) verdicts."""

    def __init__(self, num: int, max_len: int = DEFAULT_MAX_LEN, rcvbuf: int | None = None) -> None:
        self.num = num
        self.early: list[bytes] = []  # packet messages that arrived while we waited for a config ack
        self._seq = 0
        try:
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        except OSError as e:
            raise QueueError(
                e.errno, f"cannot open a netfilter netlink socket ({e}): {_bind_hint(e.errno, num)}"
            ) from e
        try:
            self.sock.bind((0, 0))
            size = rcvbuf or max(8 << 20, min(max_len * 4096, 256 << 20))
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)
            except OSError:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
            self.rcvbuf = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
            with contextlib.suppress(OSError):
                self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
            self.sock.settimeout(5.0)
            try:
                self._config(
                    _attr(NFQA_CFG_CMD, struct.pack("!BBH", CMD_BIND, 0, socket.AF_INET)),
                    _attr(NFQA_CFG_PARAMS, struct.pack("!IB", COPY_RANGE, COPY_PACKET)),
                    _attr(NFQA_CFG_QUEUE_MAXLEN, _BE32.pack(max_len)),
                )
            except QueueError as e:
                raise QueueError(e.errno, f"cannot bind NFQUEUE {num}: {e.strerror}: {_bind_hint(e.errno, num)}") from e
            try:
                self._config(
                    _attr(NFQA_CFG_MASK, _BE32.pack(F_FAIL_OPEN)), _attr(NFQA_CFG_FLAGS, _BE32.pack(F_FAIL_OPEN))
                )
                self.fail_open = True
            except QueueError:
                self.fail_open = False  # kernels before 3.6: a full queue drops (see default_max_len)
            self.sock.setblocking(False)
        except BaseException:
            self.sock.close()
            raise
        prefix = _NLH.pack(32, MSG_VERDICT, NLM_F_REQUEST, 0, 0) + self._nfgen()
        self._verdict_head = prefix + _NLA.pack(12, NFQA_VERDICT_HDR)
        self._batch_head = _NLH.pack(32, MSG_VERDICT_BATCH, NLM_F_REQUEST, 0, 0) + self._nfgen()
        self._batch_head += _NLA.pack(12, NFQA_VERDICT_HDR)
        self.send_errors = 0

    def _nfgen(self) -> bytes:
        return struct.pack("!BBH", socket.AF_UNSPEC, 0, self.num)

    def fileno(self) -> int:
        return self.sock.fileno()

    def _config(self, *attrs: bytes) -> None:
        """Sends one config message and waits for its ack; raises QueueError with the kernel's errno."""
        self._seq += 1
        body = self._nfgen() + b"".join(attrs)
        self.sock.send(_NLH.pack(16 + len(body), MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, self._seq, 0) + body)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            data = self.sock.recv(1 << 17)
            pos = 0
            while pos + 16 <= len(data):
                nlen, ntype, _flags, seq, _pid = _NLH.unpack_from(data, pos)
                if nlen < 16:
                    break
                if ntype == NLMSG_ERROR and seq == self._seq:
                    err = -_ERRNO.unpack_from(data, pos + 16)[0]
                    if err:
                        raise QueueError(err, os.strerror(err))
                    return
                if ntype == MSG_PACKET:
                    self.early.append(data[pos : pos + nlen])
                pos += (nlen + 3) & ~3
        raise QueueError(errno.ETIMEDOUT, "no answer from the kernel to an NFQUEUE config message")

    def configure(self, *attrs: bytes) -> None:
        """A config change on a running queue (blocking until acked; packets arriving meanwhile go to `early`)."""
        self.sock.setblocking(True)
        self.sock.settimeout(5.0)
        try:
            self._config(*attrs)
        finally:
            self.sock.setblocking(False)

    def set_max_len(self, n: int) -> None:
        self.configure(_attr(NFQA_CFG_QUEUE_MAXLEN, _BE32.pack(n)))

    def verdict(self, packet_id: int, verdict: int = NF_ACCEPT, payload: bytes | None = None) -> None:
        if payload is None:
            msg = self._verdict_head + _VERDICT.pack(verdict, packet_id)
        else:
            pattr = _attr(NFQA_PAYLOAD, payload)
            msg = b"".join(
                [
                    _NLH.pack(32 + len(pattr), MSG_VERDICT, NLM_F_REQUEST, 0, 0),
                    self._nfgen(),
                    _NLA.pack(12, NFQA_VERDICT_HDR),
                    _VERDICT.pack(verdict, packet_id),
                    pattr,
                ]
            )
        try:
            self.sock.send(msg)
        except OSError:
            self.send_errors += 1

    def accept_up_to(self, packet_id: int) -> None:
        """A batch verdict: accepts every queued packet with an id <= packet_id (held ones too!)."""
        try:
            self.sock.send(self._batch_head + _VERDICT.pack(NF_ACCEPT, packet_id))
        except OSError:
            self.send_errors += 1

    def unbind(self) -> None:
        with contextlib.suppress(OSError):
            self.configure(_attr(NFQA_CFG_CMD, struct.pack("!BBH", CMD_UNBIND, 0, socket.AF_INET)))

    def close(self) -> None:
        self.sock.close()


def kernel_queue_stats(queue: int) -> dict[str, int]:
    """This namespace's counters of one queue from /proc/net/netfilter/nfnetlink_queue ({} if not bound)."""
    names = (
        "queue_number",
        "peer_portid",
        "queue_total",
        "copy_mode",
        "copy_range",
        "queue_dropped",
        "queue_user_dropped",
        "id_sequence",
    )
    try:
        with open("/proc/net/netfilter/nfnetlink_queue") as f:
            for line in f:
                parts = line.split()
                if parts and parts[0] == str(queue):
                    return dict(zip(names, map(int, parts[: len(names)]), strict=False))
    except (OSError, ValueError):
        pass
    return {}


# --- the handler process -------------------------------------------------------------------------------------------


class _Conn:
    __slots__ = ("inbuf", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbuf = b""


class Handler:
    """The single-threaded loop: epoll on the queue socket, the control socket and its connections, a signal pipe;
    a timer heap for held packets (delayed ones, and reordered ones waiting for their source's next packet).

    Control requests (JSON lines, one reply line each):
    - ``{"cmd": "rules", "rules": [RULE, ...]}`` replaces the rules atomically (all valid, or none changed);
      a rule whose id existed keeps its counters (see Rule.inherit) -> ``{"ok": true}``.
    - ``{"cmd": "stats"}`` -> ``{"ok": true, "stats": {...}}`` (see `stats`).
    - ``{"cmd": "stop"}`` accepts every held and queued packet, replies ``{"ok": true, "stats": ...}``, exits 0.
    - anything else -> ``{"ok": false, "error": "..."}``.
    Verdicts: packets accepted unchanged in one read burst go out as one batch verdict when nothing is held (a
    batch verdict would also accept held packets), else one verdict each; a rewritten packet first flushes the
    accepts before it, so stripping never reorders. Rules with windows are judged against the monotonic clock read
    once per packet as it is judged (Engine.judge reads it only when some rule has a window; ~0.1-0.2 us here), so a
    window switches within a packet of its instant, not a read burst later."""

    BURST = 512  # packets read per pass before timers and control get a turn

    def __init__(self, queue: int, control_path: str, max_len: int = DEFAULT_MAX_LEN, local_ip: str | None = None):
        self.queue_num = queue
        self.control_path = control_path
        self.local_ip = local_ip
        self.engine = Engine()
        self.conns: dict[int, _Conn] = {}
        self.held: dict[int, tuple[bytes | None, bytes, int]] = {}  # id -> (new packet or None, src, kind)
        self.timers: list[tuple[float, int, int]] = []  # (deadline, seq, packet id)
        self.reorder_wait: dict[bytes, list[int]] = {}  # src -> ids held until src's next accepted packet
        self._release_after: list[int] = []
        self._timer_seq = 0
        self._dup_sockets: tuple[socket.socket, socket.socket] | None = None
        self.packets = self.accepted = self.dropped = self.max_held = self.duplicates_sent = 0
        self.dup_errors = self.marked = self.verdict_errors = 0
        self.last_id = 0
        self.stopping = False
        self.buf = bytearray(1 << 17)
        self.view = memoryview(self.buf)
        self.listener: socket.socket | None = None
        self.q = KernelQueue(queue, max_len)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(control_path)
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listener.bind(control_path)
            self.listener.listen(16)
            self.listener.setblocking(False)
        except BaseException:
            self.close()
            raise

    # --- packets ---

    def _dup_socks(self) -> tuple[socket.socket, socket.socket]:
        if self._dup_sockets is None:
            uni = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            mc = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for s in (uni, mc):
                s.setsockopt(socket.SOL_SOCKET, SO_MARK, DUP_MARK)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
                s.setblocking(False)
            mc.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
            mc.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
            if self.local_ip:
                mc.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(self.local_ip))
            self._dup_sockets = (uni, mc)
        return self._dup_sockets

    def _inject_copy(self, pkt: bytes) -> None:
        """One copy of the packet's UDP payload to its destination, from this namespace (see the module doc)."""
        ihl = (pkt[0] & 0x0F) * 4
        if pkt[9] != 17 or len(pkt) < ihl + 8 or _U16.unpack_from(pkt, 2)[0] != len(pkt):
            return  # not UDP, or a truncated copy: accepted once
        dst = socket.inet_ntoa(pkt[16:20])
        port = _U16.unpack_from(pkt, ihl + 2)[0]
        uni, mc = self._dup_socks()
        try:
            (mc if 224 <= pkt[16] <= 239 else uni).sendto(pkt[ihl + 8 :], (dst, port))
            self.duplicates_sent += 1
        except OSError:
            self.dup_errors += 1

    def _hold(self, pid: int, out: bytes | None, src: bytes, kind: int, delay: float) -> None:
        self.held[pid] = (out, src, kind)
        if len(self.held) > self.max_held:
            self.max_held = len(self.held)
        self._timer_seq += 1
        heapq.heappush(self.timers, (time.monotonic() + delay, self._timer_seq, pid))

    def _source_accepted(self, src: bytes) -> None:
        waiting = self.reorder_wait.pop(src, None)
        if waiting:
            self._release_after.extend(waiting)

    def _release(self, pid: int) -> None:
        entry = self.held.pop(pid, None)
        if entry is None:
            return
        self.q.verdict(pid, NF_ACCEPT, entry[0])
        self.accepted += 1
        if entry[2] == DELAY and self.reorder_wait:
            self._source_accepted(entry[1])

    def _flush(self, pending: list[int]) -> None:
        """Accepts the pending ids (one batch verdict when nothing is held), then the reorder releases."""
        if pending:
            if self.held:
                verdict = self.q.verdict
                for pid in pending:
                    verdict(pid)
            else:
                self.q.accept_up_to(pending[-1])
            pending.clear()
        while self._release_after:
            ids, self._release_after = self._release_after, []
            for pid in ids:
                self._release(pid)

    def read_queue(self, limit: int = BURST, judge: bool = True) -> int:
        """Reads up to `limit` netlink messages and judges their packets (or accepts them all if not judge)."""
        n_read = 0
        pending: list[int] = []
        recv_into, buf, view = self.q.sock.recv_into, self.buf, self.view
        early, self.q.early = self.q.early, []
        while n_read < limit:
            if early:
                data = early.pop(0)
                n = len(data)
                buf[:n] = data
            else:
                try:
                    n = recv_into(buf)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as e:
                    if e.errno == errno.ENOBUFS:
                        continue
                    raise
            n_read += 1
            pos = 0
            while pos + 16 <= n:
                nlen, ntype = _NLH_HEAD.unpack_from(buf, pos)
                if nlen < 16 or pos + nlen > n:
                    break
                if ntype == MSG_PACKET:
                    self._on_packet(buf, view, pos + 20, pos + nlen, pending, judge)
                elif ntype == NLMSG_ERROR and _ERRNO.unpack_from(buf, pos + 16)[0]:
                    self.verdict_errors += 1
                pos += (nlen + 3) & ~3
        self.q.early[:0] = early
        self._flush(pending)
        return n_read

    def _on_packet(self, buf: bytearray, view: memoryview, p: int, end: int, pending: list[int], judge: bool) -> None:
        pid = -1
        mark = 0
        pkt = b""
        while p + 4 <= end:
            alen, atype = _NLA.unpack_from(buf, p)
            if alen < 4:
                break
            atype &= 0x3FFF
            if atype == NFQA_PAYLOAD:
                pkt = view[p + 4 : p + alen].tobytes()
            elif atype == NFQA_PACKET_HDR:
                pid = _BE32.unpack_from(buf, p + 4)[0]
            elif atype == NFQA_MARK:
                mark = _BE32.unpack_from(buf, p + 4)[0]
            p += (alen + 3) & ~3
        if pid < 0:
            return
        self.packets += 1
        self.last_id = pid
        if mark == DUP_MARK or not judge or not pkt:
            self.marked += mark == DUP_MARK
            pending.append(pid)
            self.accepted += 1
            return
        kind, out, delay = self.engine.judge(pkt)
        if kind in (ACCEPT, DUPLICATE):
            if out is None:
                pending.append(pid)
            else:
                self._flush(pending)  # keep the order: earlier accepts go first
                self.q.verdict(pid, NF_ACCEPT, out)
            self.accepted += 1
            if self.reorder_wait:
                self._source_accepted(pkt[12:16])
            if kind == DUPLICATE:
                self._inject_copy(out or pkt)
        elif kind == DROP:
            self.q.verdict(pid, NF_DROP)
            self.dropped += 1
        elif kind == DELAY:
            self._hold(pid, out, pkt[12:16], DELAY, delay)
        else:  # REORDER
            src = pkt[12:16]
            self._hold(pid, out, src, REORDER, REORDER_MAX_HOLD)
            self.reorder_wait.setdefault(src, []).append(pid)

    def fire_timers(self) -> None:
        timers = self.timers
        now = time.monotonic()
        while timers and timers[0][0] <= now:
            self._release(heapq.heappop(timers)[2])
        self._flush([])

    def release_all(self) -> None:
        """Accepts every held packet, oldest first."""
        for pid in sorted(self.held):
            self._release(pid)
        self._release_after.clear()
        self.timers.clear()
        self.reorder_wait.clear()

    # --- control ---

    def stats(self) -> dict[str, Any]:
        """packets judged, accepted / dropped (verdicts), rewritten (stripped), held now and at most, unparsed (a
        message rule could not parse it), duplicates_sent, marked_copies (our own copies, passed untouched),
        missed_ids (numbered by the kernel but not received: socket overflow with fail-open, or still in flight),
        the kernel's queue counters and per-rule counters."""
        kq = kernel_queue_stats(self.queue_num)
        return {
            "packets": self.packets,
            "accepted": self.accepted,
            "dropped": self.dropped,
            "rewritten": self.engine.rewritten,
            "held": len(self.held),
            "max_held": self.max_held,
            "unparsed": self.engine.unparsed,
            "duplicates_sent": self.duplicates_sent,
            "duplicate_errors": self.dup_errors,
            "marked_copies": self.marked,
            "verdict_errors": self.verdict_errors + self.q.send_errors,
            "missed_ids": max(0, kq.get("id_sequence", self.last_id) - self.packets),
            "fail_open": self.q.fail_open,
            "queue": kq,
            "rules": self.engine.rule_stats(),
        }

    def handle_request(self, line: bytes) -> dict[str, Any]:
        try:
            req = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return {"ok": False, "error": f"bad JSON: {e}"}
        if not isinstance(req, dict):
            return {"ok": False, "error": "a request is a JSON object with a 'cmd'"}
        cmd = req.get("cmd")
        if cmd == "rules":
            try:
                self.engine.set_rules(compile_rules(req.get("rules")))
            except RuleValidationError as e:
                return {"ok": False, "error": str(e)}
            return {"ok": True}
        if cmd == "stats":
            return {"ok": True, "stats": self.stats()}
        if cmd == "stop":
            self.drain_for_stop()
            self.stopping = True
            return {"ok": True, "stats": self.stats()}
        return {"ok": False, "error": f"unknown command {cmd!r}; commands: rules, stats, stop"}

    def _on_conn(self, fd: int, poller: select.epoll) -> None:
        conn = self.conns[fd]
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close_conn(fd, poller)
            return
        conn.inbuf += data
        while b"\n" in conn.inbuf and not self.stopping:
            line, conn.inbuf = conn.inbuf.split(b"\n", 1)
            if not line.strip():
                continue
            reply = self.handle_request(line)
            try:
                conn.sock.setblocking(True)
                conn.sock.settimeout(5.0)
                conn.sock.sendall(json.dumps(reply).encode() + b"\n")
                conn.sock.setblocking(False)
            except OSError:
                self._close_conn(fd, poller)
                return
        if len(conn.inbuf) > MAX_CONTROL_LINE:
            with contextlib.suppress(OSError):
                conn.sock.sendall(b'{"ok": false, "error": "request line too long"}\n')
            self._close_conn(fd, poller)

    def _close_conn(self, fd: int, poller: select.epoll) -> None:
        conn = self.conns.pop(fd, None)
        if conn is not None:
            with contextlib.suppress(OSError, ValueError):
                poller.unregister(fd)
            conn.sock.close()

    # --- lifecycle ---

    def drain_for_stop(self) -> None:
        """Let new packets bypass the queue (length 0 + fail-open), accept every held and every queued packet."""
        if self.q.fail_open:  # without fail-open a length of 0 would drop every new packet
            with contextlib.suppress(OSError):
                self.q.set_max_len(0)
        self.release_all()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and self.read_queue(judge=False):
            pass

    def run(self) -> None:
        sig_r, sig_w = os.pipe()
        os.set_blocking(sig_r, False)
        os.set_blocking(sig_w, False)
        try:
            old_wakeup = signal.set_wakeup_fd(sig_w)
            install_signal_handlers()
        except ValueError:  # not the main thread: the caller stops us with the stop command
            old_wakeup = None
        poller = select.epoll()
        qfd = self.q.fileno()
        assert self.listener is not None
        lfd = self.listener.fileno()
        try:
            poller.register(qfd, select.EPOLLIN)
            poller.register(lfd, select.EPOLLIN)
            poller.register(sig_r, select.EPOLLIN)
            if self.q.early:
                self.read_queue()
            while not self.stopping:
                if _signalled:
                    self.drain_for_stop()
                    self.stopping = True
                    break
                timeout = max(0.0, self.timers[0][0] - time.monotonic()) if self.timers else 1.0
                try:
                    events = poller.poll(timeout)
                except InterruptedError:
                    events = []
                for fd, _ev in events:
                    if fd == qfd:
                        self.read_queue()
                    elif fd == lfd:
                        self._accept_conns(poller)
                    elif fd == sig_r:
                        with contextlib.suppress(OSError):
                            os.read(sig_r, 64)
                    elif fd in self.conns:
                        self._on_conn(fd, poller)
                    if self.stopping:
                        break
                if self.timers:
                    self.fire_timers()
        finally:
            # Whatever ended the loop (stop, a signal, an error), release what we hold before unbinding.
            if not self.stopping:
                with contextlib.suppress(Exception):
                    self.drain_for_stop()
            if old_wakeup is not None:
                signal.set_wakeup_fd(old_wakeup)
            poller.close()
            os.close(sig_r)
            os.close(sig_w)
            for fd in list(self.conns):
                self.conns.pop(fd).sock.close()
            self.close()

    def _accept_conns(self, poller: select.epoll) -> None:
        assert self.listener is not None
        for _ in range(64):
            try:
                sock, _addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            self.conns[sock.fileno()] = _Conn(sock)
            poller.register(sock.fileno(), select.EPOLLIN)

    def close(self) -> None:
        """Unbinds the queue and removes the control socket. Call only after drain_for_stop()."""
        q = getattr(self, "q", None)
        if q is not None and q.sock.fileno() >= 0:
            q.unbind()
            q.close()
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.control_path)
        if self._dup_sockets:
            for s in self._dup_sockets:
                s.close()
            self._dup_sockets = None


_signalled = False


def _on_signal(_signum: int, _frame: Any) -> None:
    global _signalled
    _signalled = True  # the loop sees it (the wakeup fd wakes its poll) and stops like the stop command


def install_signal_handlers() -> None:
    """SIGTERM and SIGINT stop the handler cleanly (held packets accepted first). Main thread only."""
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, _on_signal)


def main(argv: list[str] | None = None) -> int:
    install_signal_handlers()  # before binding: a signal during start-up still ends in a clean stop
    ap = argparse.ArgumentParser(prog="python -m chaos.nfqueue", description=__doc__.split("\n\n")[0])
    ap.add_argument("--queue", type=int, required=True, help="NFQUEUE number (iptables --queue-num)")
    ap.add_argument("--control", required=True, help="path of the unix control socket to create")
    ap.add_argument("--max-len", type=int, default=DEFAULT_MAX_LEN, help="kernel queue length (see default_max_len)")
    ap.add_argument("--local-ip", help="this member's address: the interface for duplicated multicasts")
    ap.add_argument("--tag", help="opaque text that identifies the handler's owner in its command line")
    args = ap.parse_args(argv)
    if not 0 <= args.queue <= 65535 or not 1 <= args.max_len <= (1 << 31):
        print(json.dumps({"ready": False, "error": "--queue must be 0..65535 and --max-len positive"}), flush=True)
        return 2
    try:
        handler = Handler(args.queue, args.control, args.max_len, args.local_ip)
    except OSError as e:
        msg = str(e) if isinstance(e, QueueError) else f"cannot create the control socket {args.control}: {e}"
        print(json.dumps({"ready": False, "error": msg}), flush=True)
        return 2
    try:
        print(json.dumps({"ready": True, "queue": args.queue, "pid": os.getpid(), "fail_open": handler.q.fail_open}))
        sys.stdout.flush()
    except BaseException:
        handler.close()
        raise
    handler.run()
    return 0


# --- a client for the orchestrator and the tests -------------------------------------------------------------------


class HandlerProcess:
    """A running handler, started with `start()` (inside namespace `ns` with `ip netns exec`, or here if ns is
    None), driven over its control socket. The socket file lives in the root filesystem, so it is reachable from
    any namespace."""

    def __init__(self, proc: subprocess.Popen[str], control_path: str, ready: dict[str, Any]) -> None:
        self.proc = proc
        self.control_path = control_path
        self.ready = ready
        self.pid: int = proc.pid

    @classmethod
    def start(
        cls,
        ns: str | None,
        queue: int,
        control_path: str,
        *,
        max_len: int | None = None,
        local_ip: str | None = None,
        tag: str | None = None,
        timeout: float = 15.0,
    ) -> HandlerProcess:
        cmd = [sys.executable, "-m", "chaos.nfqueue", "--queue", str(queue), "--control", control_path]
        if max_len:
            cmd += ["--max-len", str(max_len)]
        if local_ip:
            cmd += ["--local-ip", local_ip]
        if tag:
            cmd += ["--tag", tag]
        if ns is not None:
            cmd = ["ip", "netns", "exec", ns, *cmd]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        try:
            assert proc.stdout is not None
            ready_fds, _, _ = select.select([proc.stdout], [], [], timeout)
            line = proc.stdout.readline() if ready_fds else ""
            info = json.loads(line) if line.strip() else {"ready": False, "error": f"no ready line in {timeout} s"}
            if not info.get("ready"):
                raise QueueError(errno.EIO, f"NFQUEUE handler did not start: {info.get('error')}")
        except BaseException:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
            raise
        return cls(proc, control_path, info)

    def request(self, req: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(self.control_path)
            s.sendall(json.dumps(req).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    raise ConnectionError("the NFQUEUE handler closed the control connection")
                data += chunk
        return json.loads(data)

    def set_rules(self, rules: list[dict[str, Any]]) -> None:
        reply = self.request({"cmd": "rules", "rules": rules})
        if not reply.get("ok"):
            raise RuleValidationError(reply.get("error", "rules rejected"))

    def stats(self) -> dict[str, Any]:
        return self.request({"cmd": "stats"})["stats"]

    def stop(self, timeout: float = 10.0) -> dict[str, Any]:
        """Stops the handler (held packets are released first); returns its final stats."""
        reply = self.request({"cmd": "stop"}, timeout)
        self.proc.wait(timeout)
        return reply["stats"]

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM (same as stop) and wait; kills it if it does not exit in time. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        if self.proc.stdout:
            self.proc.stdout.close()
        return self.proc.returncode

    def alive(self) -> bool:
        return self.proc.poll() is None


if __name__ == "__main__":
    sys.exit(main())
