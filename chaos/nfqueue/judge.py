"""The judge: the rules and their state, deciding one IP packet at a time without any I/O. Packets are read in the
wire profile of its message rules (chaos/nfqueue/wires.py: chaosbed's own, or JGroups 2.12's)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from chaos.nfqueue.rule import ACCEPT, DELAY, DROP, DUPLICATE, Rule
from chaos.nfqueue.wires import WIRES, Wire

Span = Any  # a message span of the judge's wire (wires.py)
Judgement = tuple[int, bytes | None, float]  # (ACCEPT|DROP|DELAY|DUPLICATE|REORDER, new packet or None, delay s)
_ACCEPTED: Judgement = (ACCEPT, None, 0.0)
_DROPPED: Judgement = (DROP, None, 0.0)


class Judge:
    """The rules and their state; judges one IP packet at a time, without any I/O (the handler does the verdicts).

    Semantics: drop rules first (in list order): a link drop drops the packet; a message drop removes its matching
    messages (count and probability per matching message; a packet left with no message is dropped, otherwise it is
    rewritten). Then the first delay/duplicate/reorder rule that triggers decides the release: a link rule draws
    per packet; a message rule draws per matching message, in order, until one triggers (that message uses one unit
    of count, the datagram counts once in delayed/duplicated/reordered). `matched` counts every matching message
    (packet, for link rules) a rule saw, also after its count ran out. Message rules skip what they cannot parse
    (counted once per packet in `unparsed`; in `unknown` too when it is a datagram of their wire of a shape its
    walker does not know, chaos/nfqueue/wires.py); link rules apply to every IPv4 packet. A rule with a window
    (active_from_ns / active_until_ns) takes part only while judge's `now_ns` is inside it: before and after, it
    neither matches nor counts nor draws, so its count starts when it becomes active. Message rules read one wire
    (compile_rules refuses a mix): a chaosbed message matches by its one header, a JGroups 2.12 message when any of
    its headers matches; a JGroups SINGLE datagram holds one message, a LIST loses the matching ones by a cut."""

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self.rules: list[Rule] = []
        self.drop_rules: list[Rule] = []  # the drop rules active in [_valid_from, _valid_until)
        self.release_rules: list[Rule] = []  # the other rules active then
        self.timed = False  # whether any rule has a window (else judge never reads the clock)
        self._valid_from = self._valid_until = 0
        self.unparsed = 0
        self.unknown = 0  # of those, datagrams of the rules' wire of a shape its walker does not know
        self.rewritten = 0
        self.wire: Wire = WIRES["chaosbed"]
        self.set_rules(list(rules))

    def set_rules(self, rules: list[Rule]) -> None:
        old = {r.id: r for r in self.rules}
        for r in rules:
            if r.id in old and old[r.id] is not r:
                r.inherit(old[r.id])
        self.rules = rules
        self.wire = WIRES[next((r.wire for r in rules if r.match is not None), "chaosbed")]
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

    def _parse(self, pkt: bytes) -> tuple[Any, list[Span]] | None:
        """What the wire needs to rebuild the datagram and its message spans, or None (counted as unparsed: it
        passes untouched)."""
        parsed = self.wire.parse(pkt)
        if parsed is None:
            self.unparsed += 1
            if self.wire.unknown(pkt):
                self.unknown += 1
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
        parsed: tuple[Any, list[Span]] | None = None
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
                if r.matches(pkt, sp):
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
            out = self.wire.rebuild(pkt, parsed[0], kept)
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
                    if r.matches(pkt, sp):
                        r.matched += 1
                        if not hit and r.fires():
                            hit = True
            if hit:
                return _released(r, out)
        return (ACCEPT, out, 0.0)

    def rule_stats(self) -> dict[str, dict[str, int]]:
        return {r.id: r.stats() for r in self.rules}


def _released(r: Rule, out: bytes | None) -> Judgement:
    """The verdict of a delay, duplicate or reorder rule that triggered: one unit of its count spent, counted."""
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
