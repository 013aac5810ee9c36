"""Every per-message check over the events of one sender, in one vectorised pass (numpy on Arrow columns).

Spark groups the send and deliver events by (run, sender) — one shuffle — and calls `check_sender` per group:
the sender's sends and every delivery of a message claiming that sender, at any receiver.

Order of the work (docs/architecture.md): phantoms and duplicates are taken out first; FIFO compares each delivery with
the running maximum seqno of its stream; then each message owed to a receiver is either delivered, a FIFO gap (a later
seqno of the same stream was delivered) or a lost tail (`complete`); an owed message that was delivered is timed
against the later of its send and the last heal before the delivery (`delivered_within`). A unicast is owed to the
receiver's final incarnation when it was addressed to it (`dest_address`), or, without an address, sent once it had
started. The same pass counts the group's control events (`control_per_heal`) per member, kind and recovery
interval; the driver sums them over the groups. Streams:
  unicast   (sender incarnation, receiver, conn_id)      seqno = the connection's seqno
  multicast (sender incarnation, receiver incarnation)   seqno = the sender's multicast seqno
"""

from __future__ import annotations

import itertools
import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analysis.config import bound_ns
from analysis.histogram import hist_bin
from analysis.membership import RunInfo
from analysis.stream_arrays import DeliveryArrays, SendArrays, ViewArrays, member_codes, to_numpy

OUT_SCHEMA = pa.schema(
    [
        ("rtype", pa.string()),  # violation | stats | latency | hist | progress | recovery | control
        ("run", pa.string()),
        ("check", pa.string()),
        ("sender", pa.string()),
        ("receiver", pa.string()),
        ("conn_id", pa.string()),
        ("seqno", pa.int64()),
        ("msg_id", pa.string()),
        ("kind", pa.string()),
        ("t", pa.int64()),
        ("detail", pa.string()),
        ("a", pa.int64()),
        ("b", pa.int64()),
        ("payload", pa.string()),
    ]
)
INPUT_COLUMNS = ["event", "member", "kind", "sender", "dest", "dest_address", "conn_id", "seqno", "msg_id", "t", "pos"]
PROGRESS_BUCKETS = 200


class _Out:
    def __init__(self, run: str) -> None:
        self.run = run
        self.rows: dict[str, list[object]] = {f.name: [] for f in OUT_SCHEMA}

    def add(self, rtype: str, **kw: object) -> None:
        for name, col in self.rows.items():
            col.append(self.run if name == "run" else rtype if name == "rtype" else kw.get(name))

    def table(self) -> pa.Table:
        return pa.table(self.rows, schema=OUT_SCHEMA)


def _segments(keys: np.ndarray) -> np.ndarray:
    """True where a run of equal keys (in sorted order) starts."""
    start = np.ones(len(keys), bool)
    start[1:] = keys[1:] != keys[:-1]
    return start


def _running_max_before(seg_start: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each element, the maximum of the earlier values of its segment (-2 for a segment's first element).
    Works on ranks, so any int64 values are fine."""
    if not len(values):
        return values.copy()
    uniq, rank = np.unique(values, return_inverse=True)
    seg = np.cumsum(seg_start) - 1
    big = len(uniq) + 1
    run = np.maximum.accumulate(seg * big + rank) - seg * big  # running max rank, including the element itself
    before = np.r_[0, run[:-1]]
    return np.where(seg_start, -2, uniq[before])


class _SenderPass:
    """The checks of one (run, sender) group, step by step; every step is vectorised over the group."""

    def __init__(self, tbl: pa.Table, info: RunInfo, sender: str | None) -> None:
        self.info, self.sender, self.conf = info, sender, info.checks
        self.members = info.members
        self.out = _Out(info.run)
        self.counts: Counter[str] = Counter()
        self.s = SendArrays.read(tbl, info, sender)
        self.d = DeliveryArrays.read(tbl, info, self.s)
        self.alive = np.array([bool(info.alive.get(m)) for m in self.members])
        self.left = np.array([m in info.left for m in self.members], bool)
        self.sender_left = sender in info.left
        self.sender_final_inc = info.final_inc(sender) if sender is not None else 0
        self.heals = np.array(info.heals(), np.int64)
        self.within = None if self.conf.delivery_bound is None else bound_ns(self.conf.delivery_bound)
        self.recovery_max = -1  # the longest delivery time counted from the later of send and heal (ns)
        self.fstart = np.array([info.final_start(m) for m in self.members], np.int64)
        self.finc = np.array([info.final_inc(m) for m in self.members], np.int64)
        incs = [self.s.inc.max(initial=0), self.d.rinc.max(initial=0), *(info.final_inc(m) for m in self.members)]
        self.span_b = int(max(incs)) + 1
        self.span_a = max(len(self.s.conn_str), self.span_b)

    def stream_key(self, mc: np.ndarray, recv: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """One int64 per stream: (multicast?, receiver, conn code or receiver incarnation, sender incarnation)."""
        return ((mc.astype(np.int64) * len(self.members) + recv) * self.span_a + a) * self.span_b + b

    def violation(self, check: str, si: int, receiver: str, t: int, detail: str) -> None:
        s = self.s
        self.out.add(
            "violation",
            check=check,
            sender=self.sender,
            receiver=receiver,
            conn_id=s.conn_str[s.conn[si]],
            seqno=int(s.seq[si]),
            msg_id=s.msg[si].as_py(),
            kind=_kind(s.mc[si]),
            t=t,
            detail=detail,
        )

    def run(self) -> pa.Table:
        s, d = self.s, self.d
        self.counts.update(sends_unicast=int((~s.mc).sum()), sends_multicast=int(s.mc.sum()), deliveries=len(d.t))
        self.phantoms()
        first = self.first_deliveries()
        self.final_deliveries(first)
        self.fifo_order(first)
        self.owed_unicast(first)
        self.owed_multicast(first)
        f_idx = d.idx[first]
        _latency(self.out, self.sender, self.members, d.recv[first], d.t[first] - s.t[f_idx], s.mc[f_idx])
        _progress(self.out, self.info, self.members, d.recv[first], d.t[first])
        if self.recovery_max >= 0:
            self.out.add("recovery", sender=self.sender, a=self.recovery_max)
        self.out.add("stats", sender=self.sender, payload=json.dumps(dict(self.counts)))
        return self.out.table()

    def phantoms(self) -> None:
        """One no_phantoms violation per (receiver incarnation, msg_id), however often it was delivered."""
        d = self.d
        idx = np.flatnonzero(d.phantom)
        self.counts["phantoms"] = len(idx)
        if not len(idx) or not self.conf.no_phantoms:
            return
        rows = d.rows.take(pa.array(idx)).select(["member", "msg_id", "conn_id", "seqno", "kind"]).to_pylist()
        seen: dict[tuple, list] = {}
        for row, i in zip(rows, idx, strict=True):
            key = (row["member"], int(d.rinc[i]), row["msg_id"])
            if key in seen:
                seen[key][1] += 1
            else:
                seen[key] = [row, 1, i]
        for (recv, _, msg), (row, n, i) in seen.items():
            if d.why[i] == 0:
                why = f"{self.sender} never sent it"
            elif d.why[i] == 1:
                dest = self.s.dest[d.idx[i]]
                why = f"{self.sender} sent it to {self.members[dest] if dest >= 0 else 'nobody'}"
            else:
                why = f"{self.sender} sent it as another kind"
            times = "" if n == 1 else f" ({n} times)"
            self.out.add(
                "violation",
                check="no_phantoms",
                sender=self.sender,
                receiver=recv,
                conn_id=row["conn_id"],
                seqno=row["seqno"],
                msg_id=msg,
                kind=row["kind"],
                t=int(d.t[i]),
                detail=f"{recv} delivered it{times} but {why}",
            )

    def first_deliveries(self) -> np.ndarray:
        """Indices of the first delivery of each message per receiver incarnation; reports the duplicates."""
        d = self.d
        keep = np.flatnonzero(~d.phantom)
        ks = keep[np.lexsort((d.pos[keep], d.t[keep], d.idx[keep], d.rinc[keep], d.recv[keep]))]
        start = np.zeros(len(ks), bool)
        start[:1] = True
        for col in (d.recv[ks], d.rinc[ks], d.idx[ks]):  # a new (receiver, incarnation, message) starts
            start[1:] |= col[1:] != col[:-1]
        starts = np.flatnonzero(start)
        times = np.diff(np.r_[starts, len(ks)])
        first = ks[starts]
        self.counts["duplicates"] = int((times - 1).sum())
        if self.conf.exactly_once:
            for j in np.flatnonzero(times > 1):
                di = first[j]
                r = self.members[d.recv[di]]
                self.violation("exactly_once", d.idx[di], r, int(d.t[di]), f"delivered {times[j]} times to {r}")
        return first

    def final_deliveries(self, first: np.ndarray) -> None:
        """The first delivery of each message by each receiver's final incarnation (the one it is owed to), keyed by
        send index * members + receiver, for delivered_within."""
        d = self.d
        fin = first[d.rinc[first] == self.finc[d.recv[first]]]
        key = d.idx[fin] * len(self.members) + d.recv[fin]
        o = np.argsort(key, kind="stable")
        self.final_key, self.final_t = key[o], d.t[fin][o]

    def final_delivery_time(self, idx: np.ndarray, recv: np.ndarray) -> np.ndarray:
        """When the receiver's final incarnation first delivered each message (-1: never)."""
        keys = idx * len(self.members) + recv
        if not len(self.final_key):
            return np.full(len(keys), -1, np.int64)
        p = np.minimum(np.searchsorted(self.final_key, keys), len(self.final_key) - 1)
        return np.where(self.final_key[p] == keys, self.final_t[p], -1)

    def fifo_order(self, first: np.ndarray) -> None:
        """Each delivery against the running maximum seqno of its stream (one late message, one violation);
        keeps the highest delivered seqno of each stream for the gap check."""
        s, d = self.s, self.d
        f_idx = d.idx[first]
        mc = s.mc[f_idx]
        key = self.stream_key(mc, d.recv[first], np.where(mc, d.rinc[first], s.conn[f_idx]), s.inc[f_idx])
        o = np.lexsort((d.pos[first], d.t[first], key))
        key, seq, rows = key[o], s.seq[f_idx][o], first[o]
        seg_start = _segments(key)
        before = _running_max_before(seg_start, seq)
        late = np.flatnonzero(~seg_start & (seq <= before))
        self.counts["reordered"] = len(late)
        if self.conf.fifo:
            for j in late:
                di = rows[j]
                r = self.members[d.recv[di]]
                what = "again (another message)" if seq[j] == before[j] else f"after seqno {before[j]}"
                self.violation("fifo", d.idx[di], r, int(d.t[di]), f"{r} delivered seqno {seq[j]} {what}")
        last = np.r_[seg_start[1:], True] if len(key) else seg_start
        self.stream_keys = key[seg_start]
        self.stream_max = np.maximum(seq, before)[last] if len(key) else seq

    def max_delivered(self, keys: np.ndarray) -> np.ndarray:
        """The highest seqno delivered in each stream (-2 when nothing was)."""
        if not len(self.stream_keys):
            return np.full(len(keys), -2, np.int64)
        p = np.minimum(np.searchsorted(self.stream_keys, keys), len(self.stream_keys) - 1)
        return np.where(self.stream_keys[p] == keys, self.stream_max[p], -2)

    def owed_unicast(self, first: np.ndarray) -> None:
        s, d = self.s, self.d
        uni = np.flatnonzero(~s.mc & (s.dest >= 0))
        delivered = np.zeros(len(s.t), bool)
        f_idx = d.idx[first]
        delivered[f_idx[~s.mc[f_idx]]] = True
        dest = s.dest[uni]
        to_inc = s.to_inc[uni]  # addressed: to the final incarnation; else by time: once it had started
        to_final = np.where(to_inc > 0, to_inc == self.finc[dest] + 1, s.t[uni] >= self.fstart[dest])
        recv_ok = self.alive[dest] & to_final
        top = self.max_delivered(self.stream_key(np.zeros(len(uni), bool), dest, s.conn[uni], s.inc[uni]))
        self.classify(uni, dest, s.ok[uni] & recv_ok, delivered[uni], top, s.ok[uni], recv_ok, to_final, False)

    def owed_multicast(self, first: np.ndarray) -> None:
        """Per receiver: the multicasts it was owed (see docs/analysis.md: both alive, in each other's view at the
        send, and neither left the other's view afterwards), and those it was merely addressed."""
        s, d, info, sender = self.s, self.d, self.info, self.sender
        mc = np.flatnonzero(s.mc)
        if not len(mc) or sender is None:  # (a group without a sender sent nothing)
            return
        views_s, views_s_all = ViewArrays.of(info, sender), ViewArrays.of(info, sender, final_only=False)
        cur_s, cur_s_all = views_s.at_pos(s.pos[mc]), views_s_all.at_pos(s.pos[mc])
        f_idx, f_recv = d.idx[first], d.recv[first]
        for r, name in enumerate(self.members):
            delivered = np.zeros(len(s.t), bool)
            delivered[f_idx[s.mc[f_idx] & (f_recv == r)]] = True
            if info.has_views:
                views_r = ViewArrays.of(info, name)
                cur_r = views_r.at_time(s.t[mc])
                s_has_r = (cur_s >= 0) & (cur_s > views_s.last_without[name])
                r_has_s = (cur_r >= 0) & (cur_r > views_r.last_without[sender])
                in_view = views_s_all.contains(name)[cur_s_all]  # index -1 hits the extra False
                addressed = in_view | (s_has_r & r_has_s)
            else:
                s_has_r = r_has_s = addressed = np.ones(len(mc), bool)
            to_final = s.t[mc] >= self.fstart[r]
            recv_ok = self.alive[r] & to_final
            owed = s.ok[mc] & recv_ok & s_has_r & r_has_s
            n = len(mc)
            top = self.max_delivered(
                self.stream_key(np.ones(n, bool), np.full(n, r), np.full(n, info.final_inc(name)), s.inc[mc])
            )
            sel = addressed | delivered[mc]
            self.classify(
                mc[sel],
                np.full(int(sel.sum()), r),
                owed[sel],
                delivered[mc][sel],
                top[sel],
                s.ok[mc][sel],
                recv_ok[sel],
                to_final[sel],
                True,
            )

    def classify(
        self,
        idx: np.ndarray,
        recv: np.ndarray,
        owed: np.ndarray,
        delivered: np.ndarray,
        top: np.ndarray,
        sender_ok: np.ndarray,
        recv_ok: np.ndarray,
        to_final: np.ndarray,
        multicast: bool,
    ) -> None:
        """(message, receiver) pairs: an owed one is delivered (in time: delivered_within), a gap (fifo) or missing
        (complete); the others are counted by reason: from_crashed, to_crashed, left (the sender's or the receiver's
        final incarnation left the group, and the message was its), excluded (they left each other's view).
        `to_final`: the message was for the receiver's final incarnation (alive at the end or not)."""
        seq = self.s.seq[idx]
        gap = ~delivered & (seq < top)  # a later seqno of the same stream was delivered
        if multicast:  # a unicast gap is one even if someone crashed later; a multicast one only if it was owed
            gap &= owed
        missing = owed & ~delivered & ~(gap & self.conf.fifo)
        kind = _kind(multicast)
        c = self.counts
        c[f"required_{kind}"] += int(owed.sum())
        c[f"required_delivered_{kind}"] += int((owed & delivered).sum())
        from_left = ~sender_ok & (self.s.inc[idx] == self.sender_final_inc) & self.sender_left
        to_left = sender_ok & ~recv_ok & to_final & self.left[recv]
        reasons = {
            "from_crashed": ~sender_ok & ~from_left,
            "to_crashed": sender_ok & ~recv_ok & ~to_left,
            "left": from_left | to_left,
            "excluded": ~owed & sender_ok & recv_ok,
        }
        for name, sel in reasons.items():
            c[f"not_required_{name}"] += int(sel.sum())
            c[f"not_required_{name}_delivered"] += int((sel & delivered).sum())
        if self.conf.fifo:
            for j in np.flatnonzero(gap):
                r = self.members[recv[j]]
                detail = f"{r} never delivered seqno {seq[j]}, although it delivered seqno {top[j]}"
                self.violation("fifo", idx[j], r, int(self.s.t[idx[j]]), detail)
        if self.conf.complete:
            for j in np.flatnonzero(missing):
                r = self.members[recv[j]]
                why = "which stayed in the sender's view and is alive at the end" if multicast else "alive at the end"
                self.violation("complete", idx[j], r, int(self.s.t[idx[j]]), f"never delivered to {r}, {why}")
        if self.within is not None:
            self.delivered_within(idx[owed], recv[owed])

    def delivered_within(self, idx: np.ndarray, recv: np.ndarray) -> None:
        """Owed (message, receiver) pairs: the final incarnation's first delivery must come within the bound of the
        later of the send and the end of the last fault window that ended at or before the delivery."""
        dt = self.final_delivery_time(idx, recv)
        got = dt >= 0
        idx, recv, dt = idx[got], recv[got], dt[got]
        sent = self.s.t[idx]
        h = np.searchsorted(self.heals, dt, side="right") - 1
        heal = np.where(h >= 0, self.heals[np.maximum(h, 0)], sent) if len(self.heals) else sent
        after_heal = heal > sent
        base = np.where(after_heal, heal, sent)
        took = dt - base
        self.counts["within_checked"] += len(idx)
        if len(took):
            self.recovery_max = max(self.recovery_max, int(took.max()))
        late = np.flatnonzero(took > self.within)
        self.counts["within_late"] += len(late)
        bound = f"(bound {self.conf.delivery_bound:g} s)"
        for j in late:
            r = self.members[recv[j]]
            since = (
                f"the heal at {self.info.seconds(int(base[j]))}"
                if after_heal[j]
                else f"it was sent at {self.info.seconds(int(sent[j]))}"
            )
            detail = f"{r} delivered it {took[j] / 1e9:.3f} s after {since} {bound}"
            self.violation("delivered_within", idx[j], r, int(dt[j]), detail)


def check_sender(tbl: pa.Table, info: RunInfo, sender: str | None) -> pa.Table:
    """All violations, counters, latencies and progress for the messages of one sender of one run (OUT_SCHEMA), and
    the counts of the group's control events (the kinds control_per_heal lists; rows of other events are ignored)."""
    out = _SenderPass(tbl, info, sender).run()
    control = control_counts(tbl, info)
    return pa.concat_tables([out, control]) if control.num_rows else out


def control_counts(tbl: pa.Table, info: RunInfo) -> pa.Table:
    """Rows `control`: how many events of each kind control_per_heal lists each member wrote in each recovery
    interval (a = interval: 0 before the first heal, i from heal i on; b = count), for the events of `tbl`."""
    out = _Out(info.run)
    kinds = list(info.checks.control_kinds)
    if not kinds or not tbl.num_rows:
        return out.table()
    rows = tbl.filter(pc.is_in(tbl["event"], value_set=pa.array(kinds, pa.string())))
    if not rows.num_rows:
        return out.table()
    member = member_codes(rows["member"], info.members)
    kind = member_codes(rows["event"], kinds)
    heals = np.array(info.heals(), np.int64)
    interval = np.searchsorted(heals, to_numpy(rows["t"], 0).astype(np.int64), side="right")
    n_int = len(heals) + 1
    keys, counts = np.unique((member * len(kinds) + kind) * n_int + interval, return_counts=True)
    for key, n in zip(keys, counts, strict=True):
        mk, i = divmod(int(key), n_int)
        m, k = divmod(mk, len(kinds))
        if m >= 0:  # members outside the run's member list cannot occur (it is built from the histories)
            out.add("control", sender=info.members[m], kind=kinds[k], a=i, b=int(n))
    return out.table()


def _kind(is_multicast: bool) -> str:
    return "multicast" if is_multicast else "unicast"


def _latency(
    out: _Out, sender: str | None, members: list[str], recv: np.ndarray, lat: np.ndarray, mc: np.ndarray
) -> None:
    if not len(lat):
        return
    key = recv * 2 + mc.astype(np.int64)
    order = np.argsort(key, kind="stable")
    key_s, lat_s = key[order], lat[order]
    bounds = np.flatnonzero(np.r_[True, key_s[1:] != key_s[:-1], True])
    for a, b in itertools.pairwise(bounds):
        k = int(key_s[a])
        vals = lat_s[a:b]
        p50, p90, p99 = np.percentile(vals, [50, 90, 99])
        kind = _kind(bool(k % 2))
        stats = {
            "count": int(b - a),
            "mean": float(vals.mean()),
            "p50": float(p50),
            "p90": float(p90),
            "p99": float(p99),
            "max": float(vals.max()),
        }
        out.add("latency", sender=sender, receiver=members[k // 2], kind=kind, payload=json.dumps(stats))
        bins, n = np.unique(hist_bin(vals), return_counts=True)
        for bb, nn in zip(bins, n, strict=True):
            out.add("hist", sender=sender, receiver=members[k // 2], kind=kind, a=int(bb), b=int(nn))


def _progress(out: _Out, info: RunInfo, members: list[str], recv: np.ndarray, t: np.ndarray) -> None:
    if not len(t):
        return
    span = max(1, info.t_max - info.t_min + 1)
    bucket = np.clip((t - info.t_min) * PROGRESS_BUCKETS // span, 0, PROGRESS_BUCKETS - 1)
    flat = np.bincount(recv * PROGRESS_BUCKETS + bucket, minlength=len(members) * PROGRESS_BUCKETS)
    for i in np.flatnonzero(flat):
        out.add("progress", receiver=members[i // PROGRESS_BUCKETS], a=int(i % PROGRESS_BUCKETS), b=int(flat[i]))
