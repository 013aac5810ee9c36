"""A sender group's events as numpy arrays, for the vectorised checks of streams.py: its sends, the deliveries of its
messages joined to them on msg_id, and a member's views. Members are coded by their index in RunInfo.members."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analysis.membership import RunInfo
from node.addresses import parse_address


def to_numpy(col: pa.ChunkedArray | pa.Array, fill: int) -> np.ndarray:
    """An Arrow column as a numpy array, nulls replaced by `fill`."""
    return np.asarray(pc.fill_null(col, fill).to_numpy(zero_copy_only=False))


def member_codes(col: pa.ChunkedArray | pa.Array, values: list[str]) -> np.ndarray:
    """Each value's index in `values` (-1: not there, or null)."""
    return to_numpy(pc.index_in(col, value_set=pa.array(values, pa.string())), -1).astype(np.int64)


@dataclass
class ViewArrays:
    """A member's views (final incarnation) as arrays, with, per other member, the last view lacking it."""

    t: np.ndarray
    pos: np.ndarray
    last_without: dict[str, int]
    members: list[frozenset[str]]

    @classmethod
    def of(cls, info: RunInfo, member: str, final_only: bool = True) -> ViewArrays:
        vs = (info.views if final_only else info.all_views).get(member, [])
        last = {m: max((i for i, v in enumerate(vs) if m not in v.members), default=-1) for m in info.members}
        return cls(
            np.array([v.t for v in vs], np.int64),
            np.array([v.pos for v in vs], np.int64),
            last,
            [v.members for v in vs],
        )

    def contains(self, member: str) -> np.ndarray:
        """Per view: whether `member` is in it (one extra False entry so an index of -1 stays in range)."""
        return np.array([member in v for v in self.members] + [False], bool)

    def at_pos(self, pos: np.ndarray) -> np.ndarray:
        """Index of the current view at each position of the same member's file (-1: none yet)."""
        return np.searchsorted(self.pos, pos, side="right") - 1

    def at_time(self, t: np.ndarray) -> np.ndarray:
        """Index of the current view at each time (a view installed at the same time counts)."""
        return np.searchsorted(self.t, t, side="right") - 1


@dataclass
class SendArrays:
    """The sender's send events as arrays (one entry per send)."""

    msg: pa.Array
    mc: np.ndarray  # multicast?
    dest: np.ndarray  # member code, -1 for multicast or unknown
    to_inc: np.ndarray  # unicast: the receiver's incarnation number (1 = first) it was addressed to, 0 = not said
    conn: np.ndarray  # conn_id code, 0 = none
    conn_str: list[str | None]  # code -> conn_id
    seq: np.ndarray
    t: np.ndarray
    pos: np.ndarray
    inc: np.ndarray  # the sender's incarnation at the send
    ok: np.ndarray  # sent by the sender's final incarnation, and the sender is alive at the end

    @classmethod
    def read(cls, tbl: pa.Table, info: RunInfo, sender: str | None) -> SendArrays:
        sends = tbl.filter(pc.and_(pc.equal(tbl["event"], "send"), pc.equal(tbl["member"], sender)))
        sends = sends.filter(pc.is_valid(sends["msg_id"]))
        conn = pc.dictionary_encode(sends["conn_id"].combine_chunks())
        t = to_numpy(sends["t"], 0).astype(np.int64)
        restarts = info.restarts.get(sender, []) if sender is not None else []  # no sender field: nothing sent
        inc = np.searchsorted(np.array(restarts, np.int64), t, side="right")
        alive = sender is not None and bool(info.alive.get(sender, False))
        dest = member_codes(sends["dest"], info.members)
        return cls(
            msg=sends["msg_id"].combine_chunks(),
            mc=to_numpy(pc.equal(sends["kind"], "multicast"), False).astype(bool),
            dest=dest,
            to_inc=addressed_incarnations(sends, dest, info.members),
            conn=to_numpy(conn.indices, -1).astype(np.int64) + 1,
            conn_str=[None, *conn.dictionary.to_pylist()],
            seq=to_numpy(sends["seqno"], -1).astype(np.int64),
            t=t,
            pos=to_numpy(sends["pos"], 0).astype(np.int64),
            inc=inc,
            ok=alive & (inc == len(restarts)),
        )


def addressed_incarnations(sends: pa.Table, dest: np.ndarray, members: list[str]) -> np.ndarray:
    """Per send: the incarnation number of `dest` its `dest_address` names (0: none, or not an address of `dest`;
    membership.addressed_incarnation, as in the reference checker). A sender has few distinct addresses: each is
    parsed once."""
    if "dest_address" not in sends.column_names or not sends.num_rows:
        return np.zeros(sends.num_rows, np.int64)
    enc = pc.dictionary_encode(sends["dest_address"].combine_chunks())
    code = {m: i for i, m in enumerate(members)}
    parsed = [parse_address(a) for a in enc.dictionary.to_pylist()]
    # one entry per distinct address, and a last one for a null address (index -1) that matches no destination
    names = np.array([code.get(p[0], -2) if p else -2 for p in parsed] + [-2], np.int64)
    incs = np.array([min(p[1], 1 << 62) if p else 0 for p in parsed] + [0], np.int64)  # any huge one is no match
    idx = to_numpy(enc.indices, -1).astype(np.int64)
    return np.where(names[idx] == dest, incs[idx], 0)


@dataclass
class DeliveryArrays:
    """The deliveries of the sender's messages, at every receiver, joined to the sends on msg_id."""

    rows: pa.Table
    recv: np.ndarray  # member code
    t: np.ndarray
    pos: np.ndarray
    idx: np.ndarray  # index of the send, -1 when none
    rinc: np.ndarray  # the receiver's incarnation at the delivery
    phantom: np.ndarray
    why: np.ndarray  # 0 never sent, 1 sent to another member, 2 another kind

    @classmethod
    def read(cls, tbl: pa.Table, info: RunInfo, s: SendArrays) -> DeliveryArrays:
        rows = tbl.filter(pc.equal(tbl["event"], "deliver"))
        recv = member_codes(rows["member"], info.members)
        t = to_numpy(rows["t"], 0).astype(np.int64)
        idx = to_numpy(pc.index_in(rows["msg_id"], value_set=s.msg), -1).astype(np.int64)
        found = idx >= 0
        safe = np.where(found, idx, 0)
        has_sends = len(s.msg) > 0
        delivered_mc = to_numpy(pc.equal(rows["kind"], "multicast"), False).astype(bool)
        wrong_kind = found & (s.mc[safe] != delivered_mc) if has_sends else found
        wrong_dest = found & ~s.mc[safe] & (s.dest[safe] != recv) if has_sends else found
        rinc = np.zeros(len(t), np.int64)
        for code, m in enumerate(info.members):
            sel = recv == code
            if info.restarts.get(m) and sel.any():
                rinc[sel] = np.searchsorted(np.array(info.restarts[m], np.int64), t[sel], side="right")
        return cls(
            rows=rows,
            recv=recv,
            t=t,
            pos=to_numpy(rows["pos"], 0).astype(np.int64),
            idx=idx,
            rinc=rinc,
            phantom=~found | wrong_kind | wrong_dest | (recv < 0),
            why=np.where(~found, 0, np.where(wrong_dest, 1, 2)),
        )
