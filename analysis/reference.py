"""A plain-Python, single-pass reference checker: the oracle the Spark checker is tested against, and the baseline
of the benchmark. Same definitions (docs/analysis.md), written independently of `streams.py` except for the small
membership facts (`membership.py`) and the run-level checks (`run_checks.py`), which both share.

A run is checked in steps, each a function of what the previous ones found: read the history files once
(`_read`), derive the membership facts (`_run_info`), take phantoms and duplicates out (`_first_deliveries`), check
the order of what was delivered (`_fifo_order`), then decide for every message and receiver whether it was owed and
what became of it (`_Owed`), and last the run-level checks.

Usage: python -m analysis.reference RUN_OR_MATRIX_DIR   (prints violation counts per run)
"""

from __future__ import annotations

import bisect
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from analysis.config import CheckConfig, InputError, bound_ns, read_checks
from analysis.membership import (
    RunInfo,
    View,
    ViewEvent,
    addressed_incarnation,
    build_run_info,
    read_faults,
    read_schedule_start,
)
from analysis.run_checks import control_per_heal, views_converge
from analysis.schema import RunFolder, discover_runs, runner_violations
from analysis.verdict import Violation, sort_violations

Receipt = tuple[str, int, str, str]  # (receiver, receiver incarnation, sender, msg_id): one message at one receiver
Stream = tuple[str, int, str, str, object]  # (sender, its incarnation, receiver, "u"/"m", conn_id / receiver inc.)


@dataclass
class _Send:
    kind: str | None
    dest: str | None
    conn: str | None
    seqno: int
    t: int
    pos: int
    dest_address: str | None = None


@dataclass(frozen=True)
class _Delivery:
    receiver: str
    t: int
    pos: int
    sender: str | None
    msg_id: str | None
    kind: str | None
    conn: str | None
    seqno: int | None


@dataclass
class _BadLine:
    """A line that is not a complete event, with the times of the events around it in its file."""

    member: str
    file: str
    line: int
    last: bool
    prev_t: int | None
    next_t: int | None = None


@dataclass
class RefResult:
    violations: list[Violation]
    counters: Counter[str]
    skipped_lines: int
    events: int
    info: RunInfo | None = None
    notes: list[str] = field(default_factory=list)
    recovery_max: int = -1  # delivered_within: the longest time from the later of send and heal to delivery (ns)
    control: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # (member, kind) -> count per interval


def _text(v: object) -> str | None:
    """An id as text: JSON numbers and strings alike (None stays None)."""
    return None if v is None else v if isinstance(v, str) else json.dumps(v)


# ---- reading ----------------------------------------------------------------------------------------------------


@dataclass
class _History:
    """What one pass over a run's history files collects."""

    counts: dict[str, dict[str, list[int]]] = field(default_factory=lambda: defaultdict(dict))  # [n, tmin, tmax, pos]
    views: list[ViewEvent] = field(default_factory=list)
    sends: dict[str, dict[str, _Send]] = field(default_factory=lambda: defaultdict(dict))  # sender -> msg_id -> send
    deliveries: list[_Delivery] = field(default_factory=list)
    bad: list[_BadLine] = field(default_factory=list)
    events: int = 0
    control: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(list))  # -> times

    def add(self, e: dict, pos: int, control_kinds: tuple[str, ...]) -> None:
        """One complete event, the `pos`-th of its file."""
        t, m, ev = e["t"], e["member"], e["event"]
        c = self.counts[m].get(ev)
        self.counts[m][ev] = [1, t, t, pos] if c is None else [c[0] + 1, min(c[1], t), max(c[2], t), pos]
        if ev == "send" and e.get("msg_id") is not None:
            conn, address = _text(e.get("conn_id")), _text(e.get("dest_address"))
            send = _Send(e.get("kind"), e.get("dest"), conn, e.get("seqno", -1), t, pos, address)
            self.sends[m].setdefault(str(_text(e["msg_id"])), send)
        elif ev == "deliver":
            mid, conn = _text(e.get("msg_id")), _text(e.get("conn_id"))
            self.deliveries.append(_Delivery(m, t, pos, e.get("sender"), mid, e.get("kind"), conn, e.get("seqno")))
        elif ev == "view":
            self.views.append((m, t, pos, _text(e.get("view_id")), e.get("members") or [], bool(e.get("merge"))))
        if ev in control_kinds:
            self.control[(m, ev)].append(t)
        self.events += 1

    def member_events(self) -> dict[str, dict[str, int]]:
        return {m: {ev: v[0] for ev, v in evs.items()} for m, evs in self.counts.items()}

    def last_event(self) -> dict[str, str]:
        return {m: max(evs.items(), key=lambda kv: kv[1][3])[0] for m, evs in self.counts.items()}

    def t_range(self) -> tuple[int, int]:
        ts = [x for evs in self.counts.values() for v in evs.values() for x in (v[1], v[2])]
        return (min(ts), max(ts)) if ts else (0, 0)


def _complete_event(raw: bytes) -> dict | None:
    """The line's event, or None when it is not a JSON object with an integer `t` and string `member` and `event`."""
    try:
        e = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    ok = isinstance(e, dict) and type(e.get("t")) is int
    return e if ok and isinstance(e.get("member"), str) and isinstance(e.get("event"), str) else None


def _read_file(path: Path, history: _History, control_kinds: tuple[str, ...]) -> None:
    with path.open("rb") as fh:
        lines = fh.read().split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()
    pos = 0
    last_t = None
    bad_here: list[_BadLine] = []  # this file's bad lines still waiting for the time of the next event
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        e = _complete_event(raw)
        if e is None:
            bad = _BadLine(path.stem, str(path), i + 1, i == len(lines) - 1, last_t)
            history.bad.append(bad)
            bad_here.append(bad)
            continue
        for b in bad_here:
            b.next_t = e["t"]
        bad_here.clear()
        last_t = e["t"]
        history.add(e, pos, control_kinds)
        pos += 1


def _read(run: RunFolder, control_kinds: tuple[str, ...] = ()) -> _History:
    history = _History()
    for path in run.history_files:
        _read_file(path, history, control_kinds)
    return history


def _check_bad_lines(bad: list[_BadLine], fault_records: list[dict]) -> None:
    """A bad line must be its file's last one or the cut-off end of an incarnation its member lost to a kill."""
    for b in bad:
        lo = -(1 << 62) if b.prev_t is None else b.prev_t
        hi = (1 << 62) if b.next_t is None else b.next_t
        kill = any(
            f.get("kind") == "kill" and f.get("member") == b.member and lo <= f["t"] <= hi for f in fault_records
        )
        if not (b.last or kill):
            raise InputError(f"{b.file}:{b.line}: not a complete JSON event")


def _run_info(run: RunFolder, history: _History, fault_records: list[dict], checks: CheckConfig) -> RunInfo:
    return build_run_info(
        run.name,
        history.member_events(),
        history.last_event(),
        history.views,
        fault_records,
        checks,
        history.t_range(),
        read_schedule_start(run.faults_file),
    )


# ---- the per-message checks -------------------------------------------------------------------------------------


class _Findings:
    """The violations and counters of one run, as the steps find them (violations of checks that are off are not
    kept)."""

    def __init__(self, run: str, checks: CheckConfig) -> None:
        self.run, self.checks = run, checks
        self.violations: list[Violation] = []
        self.counters: Counter[str] = Counter()

    def add(
        self,
        check: str,
        sender: str | None,
        receiver: str | None,
        conn: str | None,
        seqno: int | None,
        msg_id: str | None,
        kind: str | None,
        detail: str,
        t: int | None = None,
    ) -> None:
        if self.checks.enabled(check):
            self.violations.append(Violation(check, sender, receiver, conn, seqno, msg_id, detail, self.run, kind, t))


def _is_phantom(d: _Delivery, send: _Send) -> bool:
    """Sent as another kind, or a unicast delivered by a member it was not sent to."""
    return send.kind != d.kind or (d.kind != "multicast" and send.dest != d.receiver)


def _first_deliveries(history: _History, info: RunInfo, found: _Findings) -> dict[Receipt, tuple[int, int]]:
    """The first delivery (t, pos) of each message per receiver incarnation; reports phantoms (once per receipt)
    and duplicates, and counts every phantom delivery (`phantoms`) and every delivery after the first
    (`duplicates`)."""
    firsts: dict[Receipt, tuple[int, int]] = {}
    phantoms: set[tuple[str, int, str | None, str | None]] = set()
    extra: Counter[Receipt] = Counter()  # deliveries after the first
    for d in sorted(history.deliveries, key=lambda d: (d.receiver, d.t, d.pos)):
        sender, mid, rinc = d.sender, d.msg_id, info.inc_at(d.receiver, d.t)
        send = None if sender is None or mid is None else history.sends.get(sender, {}).get(mid)
        if sender is None or mid is None or send is None or _is_phantom(d, send):  # never sent by its sender, ...
            found.counters["phantoms"] += 1
            if (d.receiver, rinc, sender, mid) not in phantoms:
                phantoms.add((d.receiver, rinc, sender, mid))
                found.add("no_phantoms", sender, d.receiver, d.conn, d.seqno, mid, d.kind, "phantom")
            continue
        key = (d.receiver, rinc, sender, mid)
        if key in firsts:
            extra[key] += 1
        else:
            firsts[key] = (d.t, d.pos)
    found.counters["duplicates"] += sum(extra.values())
    for (recv, _, sender, mid), n in extra.items():
        s = history.sends[sender][mid]
        found.add("exactly_once", sender, recv, s.conn, s.seqno, mid, s.kind, f"delivered {n + 1} times")
    return firsts


def _stream(sender: str, s_inc: int, receiver: str, send: _Send, receiver_inc: int) -> Stream:
    """FIFO's stream of a message at a receiver: per connection for unicast, per receiver incarnation for multicast."""
    if send.kind == "multicast":
        return (sender, s_inc, receiver, "m", receiver_inc)
    return (sender, s_inc, receiver, "u", send.conn)


def _fifo_order(
    firsts: dict[Receipt, tuple[int, int]], sends: dict[str, dict[str, _Send]], info: RunInfo, found: _Findings
) -> tuple[dict[Stream, int], set[tuple[str, str, str]]]:
    """Each first delivery against the running maximum seqno of its stream, in each receiver's order (the late ones
    counted as `reordered`). Returns the highest seqno delivered per stream and the delivered (sender, msg_id,
    receiver) triples."""
    stream_max: dict[Stream, int] = {}
    delivered: set[tuple[str, str, str]] = set()
    for (recv, rinc, sender, mid), _tp in sorted(firsts.items(), key=lambda kv: (kv[0][0], kv[1])):
        s = sends[sender][mid]
        stream = _stream(sender, info.inc_at(sender, s.t), recv, s, rinc)
        top = stream_max.get(stream)
        if top is not None and s.seqno <= top:
            found.counters["reordered"] += 1
            found.add("fifo", sender, recv, s.conn, s.seqno, mid, s.kind, f"seqno {s.seqno} after {top}")
        stream_max[stream] = s.seqno if top is None else max(top, s.seqno)
        delivered.add((sender, mid, recv))
    return stream_max, delivered


def _index(keys: list[int], x: int) -> int | None:
    """The index of the current view: the last one at or before x (None: none yet)."""
    i = bisect.bisect_right(keys, x) - 1
    return i if i >= 0 else None


class _Owed:
    """For every message and every receiver it concerns: was it owed (docs/analysis.md), and what became of it —
    delivered (timed for delivered_within), a gap (fifo) or missing (complete). Pairs that were not owed are counted
    by reason."""

    def __init__(
        self,
        info: RunInfo,
        firsts: dict[Receipt, tuple[int, int]],
        stream_max: dict[Stream, int],
        delivered: set[tuple[str, str, str]],
        found: _Findings,
    ) -> None:
        self.info, self.firsts, self.stream_max, self.delivered, self.found = info, firsts, stream_max, delivered, found
        self.checks = info.checks
        self.heals = info.heals()
        self.within = None if self.checks.delivery_bound is None else bound_ns(self.checks.delivery_bound)
        self.recovery_max = -1  # the longest time from the later of send and heal to delivery (ns)
        self.vpos = {m: [v.pos for v in vs] for m, vs in info.views.items()}
        self.vpos_all = {m: [v.pos for v in vs] for m, vs in info.all_views.items()}
        self.vtime = {m: [v.t for v in vs] for m, vs in info.views.items()}

    def check_all(self, sends: dict[str, dict[str, _Send]]) -> None:
        for sender, msgs in sends.items():
            for mid, s in msgs.items():
                self.check_message(sender, mid, s)

    def check_message(self, sender: str, mid: str, s: _Send) -> None:
        info = self.info
        s_inc = info.inc_at(sender, s.t)
        sender_ok = bool(info.alive.get(sender, False)) and s_inc == info.final_inc(sender)
        to_inc = None  # the receiver's incarnation number a unicast was addressed to, if the send says
        if s.kind == "multicast":
            targets = info.members
        elif s.dest in info.alive:
            targets = [s.dest]
            to_inc = addressed_incarnation(s.dest, s.dest_address)
        else:
            return
        sender_left = sender in info.left and s_inc == info.final_inc(sender)  # its final incarnation left the group
        for r in targets:
            # by time (sent once the receiver's final incarnation had started), or by address (sent to it)
            to_final = s.t >= info.final_start(r) if to_inc is None else to_inc == info.final_inc(r) + 1
            self.check_pair(sender, mid, s, s_inc, r, sender_ok, sender_left, to_final)

    def check_pair(
        self, sender: str, mid: str, s: _Send, s_inc: int, r: str, sender_ok: bool, sender_left: bool, to_final: bool
    ) -> None:
        info = self.info
        recv_ok = bool(info.alive.get(r)) and to_final
        got = (sender, mid, r) in self.delivered
        multicast = s.kind == "multicast"
        together = True
        if multicast:
            together, addressed = self.views_together(sender, r, s)
            if not (addressed or got):
                return
        required = sender_ok and recv_ok and together
        if not required:
            self.found.counters[f"not_required_{self.reason(r, sender_ok, recv_ok, sender_left, to_final)}"] += 1
        top = self.stream_max.get(_stream(sender, s_inc, r, s, info.final_inc(r)))
        gap = not got and top is not None and s.seqno < top and (required or not multicast)
        if gap and self.checks.fifo:
            self.found.add("fifo", sender, r, s.conn, s.seqno, mid, s.kind, f"gap below {top}")
        elif required and not got:
            self.found.add("complete", sender, r, s.conn, s.seqno, mid, s.kind, "missing")
        if required and self.within is not None:
            self.timed(sender, mid, r, s, self.within)

    def views_together(self, sender: str, r: str, s: _Send) -> tuple[bool, bool]:
        """For a multicast and a receiver: (in each other's view at the send and ever after, addressed: r was in the
        sender's view at the send, in any incarnation's views, or together)."""
        info = self.info
        if not info.has_views:
            return True, True
        s_views: list[View] = info.views.get(sender, [])
        cur_s = _index(self.vpos.get(sender, []), s.pos)
        cur_r = _index(self.vtime.get(r, []), s.t)
        together = (
            cur_s is not None
            and all(r in v.members for v in s_views[cur_s:])
            and cur_r is not None
            and all(sender in v.members for v in info.views[r][cur_r:])
        )
        i_all = _index(self.vpos_all.get(sender, []), s.pos)
        addressed = (i_all is not None and r in info.all_views[sender][i_all].members) or together
        return together, addressed

    def reason(self, r: str, sender_ok: bool, recv_ok: bool, sender_left: bool, to_final: bool) -> str:
        """Why a pair was not owed: from_crashed, to_crashed, left or excluded."""
        if not sender_ok:
            return "left" if sender_left else "from_crashed"
        if not recv_ok:
            return "left" if to_final and r in self.info.left else "to_crashed"
        return "excluded"

    def timed(self, sender: str, mid: str, r: str, s: _Send, within: int) -> None:
        """delivered_within: from the later of the send and the last heal at or before the delivery."""
        info = self.info
        first = self.firsts.get((r, info.final_inc(r), sender, mid))
        if first is None:  # not delivered by the incarnation it was owed to
            return
        t_del = first[0]
        i = bisect.bisect_right(self.heals, t_del) - 1
        base, since = s.t, f"it was sent at {info.seconds(s.t)}"
        if i >= 0 and self.heals[i] > s.t:
            base, since = self.heals[i], f"the heal at {info.seconds(self.heals[i])}"
        took = t_del - base
        c = self.found.counters
        c["within_checked"] += 1
        self.recovery_max = max(self.recovery_max, took)
        if took > within:
            c["within_late"] += 1
            detail = f"{r} delivered it {took / 1e9:.3f} s after {since} (bound {self.checks.delivery_bound:g} s)"
            self.found.add("delivered_within", sender, r, s.conn, s.seqno, mid, s.kind, detail, t_del)


# ---- the run-level checks and the whole run ---------------------------------------------------------------------


def _control_counts(times: dict[tuple[str, str], list[int]], heals: list[int]) -> dict[tuple[str, str], list[int]]:
    """control_per_heal's input: each member's events of each listed kind per recovery interval (this checker's own
    counting; the bound is shared)."""
    control: dict[tuple[str, str], list[int]] = {}
    for (m, kind), ts in sorted(times.items()):
        per = control[(m, kind)] = [0] * (len(heals) + 1)
        for t in ts:
            per[bisect.bisect_right(heals, t)] += 1
    return control


def check_run(run: RunFolder, bound_views: float | None = None) -> RefResult:
    """All checks of one run folder, in plain Python."""
    checks = read_checks(run.scenario_file, bound_views)
    fault_records, fault_skipped = read_faults(run.faults_file)
    history = _read(run, checks.control_kinds)
    _check_bad_lines(history.bad, fault_records)
    info = _run_info(run, history, fault_records, checks)
    found = _Findings(run.name, checks)
    firsts = _first_deliveries(history, info, found)
    stream_max, delivered = _fifo_order(firsts, history.sends, info, found)
    owed = _Owed(info, firsts, stream_max, delivered, found)
    owed.check_all(history.sends)
    vc, note = views_converge(info)
    control = _control_counts(history.control, info.heals())
    out = found.violations + vc + control_per_heal(info, control)
    out += [Violation(**v, run=run.name) for v in runner_violations(run)]  # the orchestrator's own (a `timeout`)
    skipped = len(history.bad) + fault_skipped
    notes = [note] if note else []
    return RefResult(
        sort_violations(out), found.counters, skipped, history.events, info, notes, owed.recovery_max, control
    )


def check_path(path: str | Path, bound_views: float | None = None) -> dict[str, RefResult]:
    """Every run under `path` (a run folder or a folder of runs)."""
    runs = discover_runs(path)
    if not runs:
        raise InputError(f"{path}: no run folder here")
    return {run.name: check_run(run, bound_views) for run in runs}


if __name__ == "__main__":
    for name, res in check_path(sys.argv[1]).items():
        print(name, res.events, "events", dict(Counter(v.check for v in res.violations)) or "ok")
