"""A plain-Python, single-pass reference checker: the oracle the Spark checker is tested against, and the baseline
of the benchmark. Same definitions (docs/analysis.md), written independently of `streams.py` except for the small
membership facts (`membership.py`) and views_converge, which both share.

Usage: python -m analysis.reference RUN_OR_MATRIX_DIR   (prints violation counts per run)
"""

from __future__ import annotations

import bisect
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from analysis.config import InputError, bound_ns, read_checks
from analysis.membership import (
    RunInfo,
    addressed_incarnation,
    build_run_info,
    read_faults,
    read_schedule_start,
)
from analysis.run_checks import control_per_heal, views_converge
from analysis.schema import RunFolder, discover_runs, runner_violations
from analysis.verdict import Violation, sort_violations


@dataclass
class _Send:
    kind: str
    dest: str | None
    conn: str | None
    seqno: int
    t: int
    pos: int
    dest_address: str | None = None


@dataclass
class RefResult:
    violations: list[Violation]
    counters: Counter
    skipped_lines: int
    events: int
    info: RunInfo | None = None
    notes: list[str] = field(default_factory=list)
    recovery_max: int = -1  # delivered_within: the longest time from the later of send and heal to delivery (ns)
    control: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # (member, kind) -> count per interval


def _text(v: object) -> str | None:
    return None if v is None else v if isinstance(v, str) else json.dumps(v)


def _read(run: RunFolder, control_kinds: tuple[str, ...] = ()):
    counts: dict[str, dict[str, list[int]]] = defaultdict(dict)  # member -> event -> [n, tmin, tmax, last pos]
    control: dict[tuple[str, str], list[int]] = defaultdict(list)  # (member, kind) -> times of its events
    views: list[tuple] = []
    sends: dict[str, dict[str, _Send]] = defaultdict(dict)  # sender -> msg_id -> send
    delivers: list[tuple] = []  # (receiver, t, pos, sender, msg_id, kind, conn, seqno)
    bad: list[dict] = []
    events = 0
    for path in run.history_files:
        with path.open("rb") as fh:
            lines = fh.read().split(b"\n")
        while lines and not lines[-1].strip():
            lines.pop()
        pos = 0
        last_t = None
        for i, raw in enumerate(lines):
            if not raw.strip():
                continue
            try:
                e = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                e = None
            ok = isinstance(e, dict) and type(e.get("t")) is int
            if not ok or not isinstance(e.get("member"), str) or not isinstance(e.get("event"), str):
                bad.append(
                    {
                        "member": path.stem,
                        "last": i == len(lines) - 1,
                        "prev_t": last_t,
                        "next_t": None,
                        "where": f"{path}:{i + 1}",
                    }
                )
                continue
            for b in reversed(bad):
                if b["next_t"] is not None or b["where"].rsplit(":", 1)[0] != str(path):
                    break
                b["next_t"] = e["t"]
            t, m, ev = e["t"], e["member"], e["event"]
            last_t = t
            c = counts[m].get(ev)
            counts[m][ev] = [1, t, t, pos] if c is None else [c[0] + 1, min(c[1], t), max(c[2], t), pos]
            if ev == "send" and e.get("msg_id") is not None:
                sends[m].setdefault(
                    _text(e["msg_id"]),
                    _Send(
                        e.get("kind"),
                        e.get("dest"),
                        _text(e.get("conn_id")),
                        e.get("seqno", -1),
                        t,
                        pos,
                        _text(e.get("dest_address")),
                    ),
                )
            elif ev == "deliver":
                delivers.append(
                    (
                        m,
                        t,
                        pos,
                        e.get("sender"),
                        _text(e.get("msg_id")),
                        e.get("kind"),
                        _text(e.get("conn_id")),
                        e.get("seqno"),
                    )
                )
            elif ev == "view":
                views.append((m, t, pos, _text(e.get("view_id")), e.get("members") or [], bool(e.get("merge"))))
            if ev in control_kinds:
                control[(m, ev)].append(t)
            pos += 1
            events += 1
    return counts, views, sends, delivers, bad, events, control


def check_run(run: RunFolder, bound_views: float | None = None) -> RefResult:
    """All checks of one run folder, in plain Python."""
    checks = read_checks(run.scenario_file, bound_views)
    fault_records, fault_skipped = read_faults(run.faults_file)
    counts, views, sends, delivers, bad, events, control_times = _read(run, checks.control_kinds)
    for b in bad:
        lo = -(1 << 62) if b["prev_t"] is None else b["prev_t"]
        hi = (1 << 62) if b["next_t"] is None else b["next_t"]
        kill = any(
            f.get("kind") == "kill" and f.get("member") == b["member"] and lo <= f["t"] <= hi for f in fault_records
        )
        if not (b["last"] or kill):
            raise InputError(f"{b['where']}: not a complete JSON event")
    last_event = {m: max(evs.items(), key=lambda kv: kv[1][3])[0] for m, evs in counts.items()}
    ts = [x for evs in counts.values() for v in evs.values() for x in (v[1], v[2])]
    member_events = {m: {ev: v[0] for ev, v in evs.items()} for m, evs in counts.items()}
    t_range = (min(ts), max(ts)) if ts else (0, 0)
    t_schedule = read_schedule_start(run.faults_file)
    info = build_run_info(run.name, member_events, last_event, views, fault_records, checks, t_range, t_schedule)
    out: list[Violation] = []
    c: Counter = Counter()

    def add(
        check: str,
        s: str | None,
        r: str | None,
        conn: str | None,
        seq: int | None,
        mid: str | None,
        kind: str | None,
        detail: str,
    ) -> None:
        if checks.enabled(check):
            out.append(Violation(check, s, r, conn, seq, mid, detail, run.name, kind))

    # phantoms and duplicates; the first delivery of each message per receiver incarnation
    firsts: dict[tuple, tuple] = {}
    seen_phantom: dict[tuple, int] = {}
    dup_count: Counter = Counter()
    for d in sorted(delivers, key=lambda d: (d[0], d[1], d[2])):
        recv, t, pos, sender, mid, kind, conn, seq = d
        rinc = info.inc_at(recv, t)
        snd = sends.get(sender, {}).get(mid)
        if snd is None or snd.kind != kind or (kind != "multicast" and snd.dest != recv):
            key = (recv, rinc, sender, mid)
            if key not in seen_phantom:
                seen_phantom[key] = 0
                add("no_phantoms", sender, recv, conn, seq, mid, kind, "phantom")
            seen_phantom[key] += 1
            continue
        key = (recv, rinc, sender, mid)
        if key in firsts:
            dup_count[key] += 1
        else:
            firsts[key] = (t, pos)
    for (recv, _, sender, mid), n in dup_count.items():
        s = sends[sender][mid]
        add("exactly_once", sender, recv, s.conn, s.seqno, mid, s.kind, f"delivered {n + 1} times")

    # FIFO against the running maximum of each stream, in each receiver's order
    stream_max: dict[tuple, int] = {}
    delivered: set[tuple[str, str, str]] = set()  # (sender, msg_id, receiver)
    for (recv, rinc, sender, mid), _tp in sorted(firsts.items(), key=lambda kv: (kv[0][0], kv[1])):
        s = sends[sender][mid]
        s_inc = info.inc_at(sender, s.t)
        stream = (sender, s_inc, recv, "m", rinc) if s.kind == "multicast" else (sender, s_inc, recv, "u", s.conn)
        top = stream_max.get(stream)
        if top is not None and s.seqno <= top:
            add("fifo", sender, recv, s.conn, s.seqno, mid, s.kind, f"seqno {s.seqno} after {top}")
        stream_max[stream] = s.seqno if top is None else max(top, s.seqno)
        delivered.add((sender, mid, recv))

    # delivered_within: from the later of the send and the last heal at or before the delivery
    heals = info.heals()
    within = None if checks.delivery_bound is None else bound_ns(checks.delivery_bound)
    recovery_max = -1

    def timed(sender: str, mid: str, r: str, s: _Send) -> None:
        nonlocal recovery_max
        first = firsts.get((r, info.final_inc(r), sender, mid))
        if first is None:  # not delivered by the incarnation it was owed to
            return
        t_del = first[0]
        i = bisect.bisect_right(heals, t_del) - 1
        base, since = s.t, f"it was sent at {info.seconds(s.t)}"
        if i >= 0 and heals[i] > s.t:
            base, since = heals[i], f"the heal at {info.seconds(heals[i])}"
        took = t_del - base
        c["within_checked"] += 1
        recovery_max = max(recovery_max, took)
        if took > within:
            c["within_late"] += 1
            detail = f"{r} delivered it {took / 1e9:.3f} s after {since} (bound {checks.delivery_bound:g} s)"
            out.append(Violation("delivered_within", sender, r, s.conn, s.seqno, mid, detail, run.name, s.kind, t_del))

    # what each receiver was owed: delivered (in time), a gap (fifo) or lost (complete)
    vpos = {m: [v.pos for v in vs] for m, vs in info.views.items()}
    vpos_all = {m: [v.pos for v in vs] for m, vs in info.all_views.items()}
    vtime = {m: [v.t for v in vs] for m, vs in info.views.items()}
    for sender, msgs in sends.items():
        s_final = info.final_inc(sender)
        s_views = info.views.get(sender, [])
        s_all = info.all_views.get(sender, [])
        for mid, s in msgs.items():
            s_inc = info.inc_at(sender, s.t)
            sender_ok = info.alive.get(sender, False) and s_inc == s_final
            multicast = s.kind == "multicast"
            to_inc = None  # the receiver's incarnation number a unicast was addressed to, if the send says
            if multicast:
                targets = info.members
            elif s.dest in info.alive:
                targets = [s.dest]
                to_inc = addressed_incarnation(s.dest, s.dest_address)
            else:
                continue
            sender_left = sender in info.left and s_inc == s_final  # its final incarnation left the group
            for r in targets:
                # by time (sent once the receiver's final incarnation had started), or by address (sent to it)
                to_final = s.t >= info.final_start(r) if to_inc is None else to_inc == info.final_inc(r) + 1
                recv_ok = bool(info.alive.get(r)) and to_final
                got = (sender, mid, r) in delivered
                if multicast:
                    stream = (sender, s_inc, r, "m", info.final_inc(r))
                    if info.has_views:
                        cur_s = _index(vpos.get(sender, []), s.pos)
                        cur_r = _index(vtime.get(r, []), s.t)
                        together = (
                            cur_s is not None
                            and all(r in v.members for v in s_views[cur_s:])
                            and cur_r is not None
                            and all(sender in v.members for v in info.views[r][cur_r:])
                        )
                        i_all = _index(vpos_all.get(sender, []), s.pos)
                        addressed = (i_all is not None and r in s_all[i_all].members) or together
                    else:
                        together = addressed = True
                    if not (addressed or got):
                        continue
                else:
                    stream = (sender, s_inc, r, "u", s.conn)
                    together = True
                required = sender_ok and recv_ok and together
                if not required:
                    if not sender_ok:
                        reason = "left" if sender_left else "from_crashed"
                    elif not recv_ok:
                        reason = "left" if to_final and r in info.left else "to_crashed"
                    else:
                        reason = "excluded"
                    c[f"not_required_{reason}"] += 1
                top = stream_max.get(stream)
                gap = not got and top is not None and s.seqno < top and (required or not multicast)
                if gap and checks.fifo:
                    add("fifo", sender, r, s.conn, s.seqno, mid, s.kind, f"gap below {top}")
                elif required and not got:
                    add("complete", sender, r, s.conn, s.seqno, mid, s.kind, "missing")
                if required and within is not None:
                    timed(sender, mid, r, s)
    vc, note = views_converge(info)
    out.extend(vc)

    # control_per_heal: each member's events of each listed kind, per recovery interval
    control: dict[tuple[str, str], list[int]] = {}
    for (m, kind), times in sorted(control_times.items()):
        per = control[(m, kind)] = [0] * (len(heals) + 1)
        for t in times:
            per[bisect.bisect_right(heals, t)] += 1
    out += control_per_heal(info, control)  # the counting above is this checker's own; the bound is shared
    notes = [note] if note else []
    out += [Violation(**v, run=run.name) for v in runner_violations(run)]  # the orchestrator's own (a `timeout`)
    return RefResult(sort_violations(out), c, len(bad) + fault_skipped, events, info, notes, recovery_max, control)


def _index(keys: list[int], x: int) -> int | None:
    """The index of the current view: the last one at or before x (None: none yet)."""
    i = bisect.bisect_right(keys, x) - 1
    return i if i >= 0 else None


def check_path(path: str | Path, bound_views: float | None = None) -> dict[str, RefResult]:
    """Every run under `path` (a run folder or a folder of runs)."""
    runs = discover_runs(path)
    if not runs:
        raise InputError(f"{path}: no run folder here")
    return {run.name: check_run(run, bound_views) for run in runs}


if __name__ == "__main__":
    for name, res in check_path(sys.argv[1]).items():
        print(name, res.events, "events", dict(Counter(v.check for v in res.violations)) or "ok")
