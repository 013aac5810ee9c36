"""Unit and property tests for node/tables.py (RetransmitTable and RingBuffer)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.tables import RetransmitTable, RingBuffer


def marks(t: RetransmitTable | RingBuffer) -> tuple[int, int, int]:
    return t.low, t.hd, t.hr


def filled(seqnos: list[int], offset: int = 0) -> RetransmitTable[str]:
    t: RetransmitTable[str] = RetransmitTable(offset)
    for s in seqnos:
        assert t.add(s, f"m{s}")
    return t


def ranges_of(absent: list[int]) -> list[tuple[int, int]]:
    """Group ascending seqnos into inclusive (first, last) ranges."""
    out: list[tuple[int, int]] = []
    for s in absent:
        if out and out[-1][1] == s - 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


# ====================================================================== RetransmitTable


class TestRetransmitTable:
    @pytest.mark.parametrize("offset", [0, 100, -7])
    def test_new_table(self, offset: int) -> None:
        t: RetransmitTable[str] = RetransmitTable(offset)
        assert marks(t) == (offset, offset, offset)
        assert len(t) == 0
        assert t.num_missing() == 0
        assert t.missing() == []
        assert t.highest_deliverable() == offset
        assert t.remove_deliverable() == []
        assert t.get(offset) is None and t.get(offset + 1) is None
        assert offset + 1 not in t
        assert t.capacity() == 0
        assert t.add(offset, "x") is False  # seqnos start at offset + 1
        assert t.add(offset + 1, "x") is True
        assert marks(t) == (offset, offset, offset + 1)

    def test_default_offset_is_zero(self) -> None:
        assert marks(RetransmitTable()) == (0, 0, 0)

    def test_generic_alias_instantiates(self) -> None:
        t = RetransmitTable[int](3)
        assert t.add(4, 44) and t.get(4) == 44

    def test_watermarks_are_read_only(self) -> None:
        t: RetransmitTable[str] = RetransmitTable()
        for name in ("low", "hd", "hr"):
            with pytest.raises(AttributeError):
                setattr(t, name, 5)

    def test_add_get_contains_len(self) -> None:
        t = filled([1, 2, 3])
        assert marks(t) == (0, 0, 3)
        assert len(t) == 3
        assert [t.get(s) for s in (0, 1, 2, 3, 4)] == [None, "m1", "m2", "m3", None]
        assert 2 in t and 4 not in t and 0 not in t

    def test_duplicate_rejected_without_change(self) -> None:
        t = filled([1, 2])
        assert t.add(2, "other") is False
        assert t.get(2) == "m2"
        assert len(t) == 2 and marks(t) == (0, 0, 2)

    def test_seqno_at_or_below_hd_rejected(self) -> None:
        t = filled([1, 2, 3, 5])
        assert t.remove_deliverable() == ["m1", "m2", "m3"]
        for s in (1, 3, -1):
            assert t.add(s, "late") is False
        assert len(t) == 1 and marks(t) == (3, 3, 5)
        assert t.add(4, "m4") is True

    def test_far_ahead_leaves_gap(self) -> None:
        t: RetransmitTable[str] = RetransmitTable()
        assert t.add(10, "m10")
        assert marks(t) == (0, 0, 10)
        assert len(t) == 1
        assert t.missing() == [(1, 9)]
        assert t.num_missing() == 9
        assert t.capacity() >= 10
        assert t.highest_deliverable() == 0

    def test_fill_gap_does_not_move_hr(self) -> None:
        t = filled([1, 5])
        assert t.add(3, "m3")
        assert t.hr == 5
        assert t.missing() == [(2, 2), (4, 4)]
        assert t.num_missing() == 2

    def test_missing_ranges_and_max_count(self) -> None:
        t = filled([1, 2, 5, 6, 9])
        assert t.missing() == [(3, 4), (7, 8)]
        assert t.num_missing() == 4
        assert t.missing(1) == [(3, 3)]
        assert t.missing(2) == [(3, 4)]
        assert t.missing(3) == [(3, 4), (7, 7)]
        assert t.missing(4) == [(3, 4), (7, 8)]
        assert t.missing(100) == [(3, 4), (7, 8)]
        assert t.missing(0) == t.missing(-1) == [(3, 4), (7, 8)]

    def test_missing_trailing_gap_before_hr_and_after_delivery(self) -> None:
        t = filled([1, 2, 3, 7])
        assert t.missing() == [(4, 6)]
        t.remove_deliverable()
        assert t.missing() == [(4, 6)]  # only (hd, hr] is considered
        t.add(5, "m5")
        assert t.missing() == [(4, 4), (6, 6)]
        assert t.num_missing() == 2

    def test_highest_deliverable(self) -> None:
        t = filled([1, 2, 3, 5, 6])
        assert t.highest_deliverable() == 3
        t.add(4, "m4")
        assert t.highest_deliverable() == 6
        assert marks(t) == (0, 0, 6)  # reading only

    def test_remove_deliverable_stops_at_gap(self) -> None:
        t = filled([1, 2, 3, 5, 6])
        assert t.remove_deliverable() == ["m1", "m2", "m3"]
        assert marks(t) == (3, 3, 6)
        assert len(t) == 2
        assert t.get(2) is None and 2 not in t
        assert t.remove_deliverable() == []
        assert marks(t) == (3, 3, 6)
        t.add(4, "m4")
        assert t.remove_deliverable() == ["m4", "m5", "m6"]
        assert marks(t) == (6, 6, 6)
        assert len(t) == 0 and t.num_missing() == 0

    def test_remove_deliverable_max_count(self) -> None:
        t = filled([1, 2, 3, 4, 5])
        assert t.remove_deliverable(2) == ["m1", "m2"]
        assert marks(t) == (2, 2, 5)
        assert t.remove_deliverable(1) == ["m3"]
        assert t.remove_deliverable(10) == ["m4", "m5"]
        assert marks(t) == (5, 5, 5)

    def test_remove_deliverable_nothing_when_first_missing(self) -> None:
        t = filled([2, 3])
        assert t.remove_deliverable() == []
        assert marks(t) == (0, 0, 3) and len(t) == 2

    def test_purge_cumulative_ack(self) -> None:
        t = filled(list(range(1, 11)))
        assert t.purge(4) == 4
        assert marks(t) == (4, 4, 10)
        assert len(t) == 6
        assert t.get(4) is None and t.get(5) == "m5"
        assert t.purge(4) == 0 and t.purge(2) == 0 and t.purge(-5) == 0
        assert marks(t) == (4, 4, 10)
        assert t.add(3, "late") is False

    def test_purge_beyond_hr_stops_at_hr(self) -> None:
        t = filled([1, 2, 3])
        assert t.purge(100) == 3
        assert marks(t) == (3, 3, 3)
        assert len(t) == 0
        assert t.capacity() == 0
        assert t.add(3, "x") is False
        assert t.add(4, "m4") is True  # hd did not jump to 100
        assert marks(t) == (3, 3, 4)

    def test_purge_counts_only_present_items(self) -> None:
        t = filled([1, 3, 5, 8])
        assert t.num_missing() == 4
        assert t.purge(6) == 3  # 1, 3 and 5; the gaps 2, 4, 6 are passed over
        assert marks(t) == (6, 6, 8)
        assert len(t) == 1
        assert t.missing() == [(7, 7)]
        assert t.num_missing() == 1

    def test_purge_on_empty_table_is_noop(self) -> None:
        t: RetransmitTable[str] = RetransmitTable(5)
        assert t.purge(10) == 0
        assert marks(t) == (5, 5, 5)

    def test_add_batch(self) -> None:
        t = filled([1, 2, 3])
        t.remove_deliverable(1)  # hd = 1
        batch = [(1, "old"), (2, "dup"), (4, "m4"), (4, "dup"), (7, "m7"), (5, "m5")]
        assert t.add_batch(batch) == 3
        assert marks(t) == (1, 1, 7)
        assert len(t) == 5
        assert t.get(2) == "m2" and t.get(4) == "m4"
        assert t.missing() == [(6, 6)]
        assert t.add_batch([]) == 0
        assert t.add_batch(iter([(6, "m6")])) == 1
        assert t.num_missing() == 0

    def test_none_rejected(self) -> None:
        t = filled([1])
        with pytest.raises(ValueError):
            t.add(2, None)  # type: ignore[arg-type]
        assert marks(t) == (0, 0, 1) and len(t) == 1
        with pytest.raises(ValueError):
            t.add_batch([(2, "m2"), (3, None), (4, "m4")])  # type: ignore[list-item]
        # the pairs before the bad one stay added, and the bookkeeping matches
        assert marks(t) == (0, 0, 2) and len(t) == 2 and t.num_missing() == 0

    def test_items(self) -> None:
        t = filled([1, 2, 4, 6, 7])
        t.remove_deliverable()  # hd = 2
        assert t.items(1, 10) == [(4, "m4"), (6, "m6"), (7, "m7")]
        assert t.items(4, 6) == [(4, "m4"), (6, "m6")]
        assert t.items(5, 5) == []
        assert t.items(6, 4) == []
        assert t.items(8, 20) == []

    def test_compaction_keeps_capacity_within_twice_window(self) -> None:
        t = filled(list(range(1, 101)))
        assert t.capacity() == 100
        t.purge(30)
        assert t.capacity() == 100  # dead prefix 30 of 100: not yet compacted
        t.purge(60)
        assert t.capacity() <= 2 * (t.hr - t.low)
        assert [t.get(s) for s in (60, 61, 100)] == [None, "m61", "m100"]
        assert len(t) == 40
        assert t.remove_deliverable(35) == [f"m{s}" for s in range(61, 96)]
        assert t.capacity() <= 2 * (t.hr - t.low)
        assert t.add(101, "m101") and t.get(101) == "m101" and t.missing() == []

    def test_repr(self) -> None:
        assert "hr=2" in repr(filled([2]))

    def test_memory_bound_sender(self) -> None:
        """1,000,000 sends with at most 1,000 unacked: capacity stays bounded by the window."""
        window = 1000
        t: RetransmitTable[int] = RetransmitTable()
        add = t.add
        worst = 0
        for s in range(1, 1_000_001):
            add(s, s)
            if s % 100 == 0:
                t.purge(s - window + 100)  # acks lag behind by up to `window` messages
                worst = max(worst, t.capacity())
                assert t.hr - t.low <= window
        assert worst <= 4 * window
        unacked = len(t)
        assert t.purge(10**9) == unacked
        assert marks(t) == (1_000_000, 1_000_000, 1_000_000)
        assert len(t) == 0

    def test_memory_bound_receiver_out_of_order(self) -> None:
        """1,000,000 receptions, every 997th held back 500 messages: capacity stays bounded, order is kept."""
        t: RetransmitTable[int] = RetransmitTable()
        add = t.add
        remove = t.remove_deliverable
        held: list[int] = []
        expect = 1
        worst = 0
        n = 1_000_000
        for s in range(1, n + 1):
            if s % 997 == 0:
                held.append(s)
            else:
                add(s, s)
            if held and s - held[0] >= 500:
                add(held[0], held.pop(0))
            for x in remove():
                assert x == expect
                expect += 1
            if s % 1000 == 0:
                worst = max(worst, t.capacity())
        for h in held:
            add(h, h)
        assert remove() == list(range(expect, n + 1))
        assert worst <= 4 * 1000
        assert marks(t) == (n, n, n)


# ====================================================================== RingBuffer


class TestRingBuffer:
    @pytest.mark.parametrize("capacity", [0, -1])
    def test_capacity_must_be_positive(self, capacity: int) -> None:
        with pytest.raises(ValueError):
            RingBuffer(capacity)

    @pytest.mark.parametrize("offset", [0, 42, -3])
    def test_new_ring(self, offset: int) -> None:
        r: RingBuffer[str] = RingBuffer(4, offset)
        assert r.capacity == 4
        assert marks(r) == (offset, offset, offset)
        assert len(r) == 0 and r.space() == 4
        assert r.num_missing() == 0 and r.missing() == []
        assert r.highest_deliverable() == offset
        assert r.remove_deliverable() == []
        assert r.can_add(offset + 1) and r.can_add(offset + 4)
        assert not r.can_add(offset) and not r.can_add(offset + 5)

    def test_read_only_properties(self) -> None:
        r: RingBuffer[str] = RingBuffer(4)
        for name in ("capacity", "low", "hd", "hr"):
            with pytest.raises(AttributeError):
                setattr(r, name, 5)

    def test_generic_alias_instantiates(self) -> None:
        r = RingBuffer[int](2)
        assert r.add(1, 11) and r.get(1) == 11

    def test_add_get_contains_space(self) -> None:
        r: RingBuffer[str] = RingBuffer(4)
        assert r.add(1, "m1") and r.add(2, "m2")
        assert marks(r) == (0, 0, 2)
        assert len(r) == 2 and r.space() == 2
        assert [r.get(s) for s in (0, 1, 2, 3)] == [None, "m1", "m2", None]
        assert 1 in r and 3 not in r and 0 not in r

    def test_rejects_outside_window_duplicates_and_delivered(self) -> None:
        r: RingBuffer[str] = RingBuffer(4)
        assert r.add(5, "m5") is False and not r.can_add(5)  # low + capacity = 4
        assert r.add(4, "m4") is True
        assert r.add(4, "dup") is False and not r.can_add(4)
        assert r.get(4) == "m4"
        assert r.add(0, "m0") is False and r.add(-9, "x") is False
        assert r.add(1, "m1")
        assert r.remove_deliverable() == ["m1"]
        assert r.add(1, "again") is False and not r.can_add(1)  # <= hd
        assert len(r) == 2 and marks(r) == (0, 1, 4)

    def test_gap_missing_and_max_count(self) -> None:
        r: RingBuffer[str] = RingBuffer(10)
        for s in (1, 2, 5, 6, 9):
            assert r.add(s, f"m{s}")
        assert r.hr == 9 and r.space() == 1
        assert r.missing() == [(3, 4), (7, 8)]
        assert r.num_missing() == 4
        assert r.missing(1) == [(3, 3)]
        assert r.missing(3) == [(3, 4), (7, 7)]
        assert r.missing(99) == r.missing(0) == [(3, 4), (7, 8)]
        assert r.add(3, "m3") and r.num_missing() == 3 and r.hr == 9
        assert r.highest_deliverable() == 3

    def test_remove_deliverable_does_not_free(self) -> None:
        r: RingBuffer[str] = RingBuffer(3)
        for s in (1, 2, 3):
            assert r.add(s, f"m{s}")
        assert not r.can_add(4) and r.space() == 0
        assert r.remove_deliverable() == ["m1", "m2", "m3"]
        assert marks(r) == (0, 3, 3)
        assert len(r) == 3 and r.get(2) == "m2" and 2 in r  # kept for retransmission until purged
        assert r.add(4, "m4") is False  # still outside the window
        assert r.purge(2) == 2
        assert marks(r) == (2, 3, 3) and len(r) == 1 and r.get(2) is None and r.get(3) == "m3"
        assert r.space() == 2
        assert r.add(4, "m4") and r.add(5, "m5") and not r.can_add(6)

    def test_remove_deliverable_max_count_and_gap(self) -> None:
        r: RingBuffer[str] = RingBuffer(8)
        for s in (1, 2, 3, 4, 6):
            r.add(s, f"m{s}")
        assert r.remove_deliverable(2) == ["m1", "m2"]
        assert r.hd == 2
        assert r.remove_deliverable() == ["m3", "m4"]
        assert r.hd == 4
        assert r.remove_deliverable() == []
        assert marks(r) == (0, 4, 6) and r.missing() == [(5, 5)]

    def test_purge_is_capped_at_hd(self) -> None:
        r: RingBuffer[str] = RingBuffer(8)
        for s in (1, 2, 3, 4, 5):
            r.add(s, f"m{s}")
        r.remove_deliverable(3)
        assert r.purge(100) == 3
        assert marks(r) == (3, 3, 5)
        assert r.get(4) == "m4" and len(r) == 2
        assert r.purge(3) == 0 and r.purge(1) == 0
        assert marks(r) == (3, 3, 5)

    def test_purge_before_delivery_is_noop(self) -> None:
        r: RingBuffer[str] = RingBuffer(4)
        r.add(1, "m1")
        assert r.purge(1) == 0
        assert marks(r) == (0, 0, 1) and len(r) == 1

    def test_sender_mark_delivered_and_ack(self) -> None:
        r: RingBuffer[str] = RingBuffer(4)
        for s in (1, 2, 3):
            assert r.add(s, f"m{s}")
            r.mark_delivered(s)
        assert marks(r) == (0, 3, 3)
        r.mark_delivered(100)  # capped at hr
        assert r.hd == 3
        r.mark_delivered(1)  # never goes back
        assert r.hd == 3
        assert r.add(4, "m4") and not r.can_add(5)  # sender would block
        r.mark_delivered(4)
        assert r.purge(2) == 2  # min ack over members is 2
        assert r.can_add(5) and r.can_add(6) and not r.can_add(7)
        assert r.get(3) == "m3"  # still there for retransmission

    def test_mark_delivered_over_gap_updates_missing(self) -> None:
        r: RingBuffer[str] = RingBuffer(8)
        for s in (1, 4, 6):
            r.add(s, f"m{s}")
        assert r.num_missing() == 3
        r.mark_delivered(4)
        assert r.hd == 4 and r.num_missing() == 1 and r.missing() == [(5, 5)]
        assert r.add(2, "late") is False
        assert r.purge(4) == 2  # only the present ones are counted
        assert len(r) == 1 and marks(r) == (4, 4, 6)

    def test_none_rejected(self) -> None:
        r: RingBuffer[str] = RingBuffer(2)
        with pytest.raises(ValueError):
            r.add(1, None)  # type: ignore[arg-type]
        assert len(r) == 0 and r.hr == 0

    def test_missing_across_wrap(self) -> None:
        r: RingBuffer[str] = RingBuffer(5, offset=7)  # slots of 8..12 wrap around index 0
        for s in (8, 10, 12):
            r.add(s, f"m{s}")
        assert r.missing() == [(9, 9), (11, 11)]
        assert r.remove_deliverable() == ["m8"]
        r.purge(8)
        assert r.add(13, "m13") and r.missing(1) == [(9, 9)]
        assert [r.get(s) for s in range(8, 14)] == [None, None, "m10", None, "m12", "m13"]

    def test_wrap_around_many_times(self) -> None:
        """Capacity 7, 10,000 messages received out of order within the window: delivered in order."""
        cap = 7
        r: RingBuffer[int] = RingBuffer(cap)
        delivered: list[int] = []
        n = 10_000
        for block in range(0, n, cap):
            order = [s for s in range(block + 1, min(block + cap, n) + 1)]
            order = order[1::2] + order[0::2]  # evens first: gaps, then fill them
            for s in order:
                assert r.add(s, s)
                assert len(r) <= cap and r.space() >= 0
            got = r.remove_deliverable()
            delivered.extend(got)
            assert r.num_missing() == 0
            assert r.purge(r.hd) == len(got)
            assert len(r) == 0
        assert delivered == list(range(1, n + 1))
        assert marks(r) == (n, n, n)

    def test_repr(self) -> None:
        assert "capacity=3" in repr(RingBuffer(3))

    def test_memory_bound_sender(self) -> None:
        """1,000,000 sends through a window of 1,000: the sender blocks on can_add and frees on acks."""
        cap = 1000
        r: RingBuffer[int] = RingBuffer(cap)
        buf_size = r._buf.__sizeof__()
        s = 0
        blocked = 0
        while s < 1_000_000:
            if not r.can_add(s + 1):
                blocked += 1
                r.purge(r.hd - 300)  # acks lag 300 behind
                continue
            s += 1
            r.add(s, s)
            r.mark_delivered(s)
        assert blocked > 0
        assert r.capacity == cap and r._buf.__sizeof__() == buf_size
        assert len(r) <= cap
        assert r.hd == r.hr == 1_000_000

    def test_memory_bound_receiver(self) -> None:
        """1,000,000 receptions, every 997th held back 500 messages, purging on delivery."""
        cap = 1000
        r: RingBuffer[int] = RingBuffer(cap)
        buf_size = r._buf.__sizeof__()
        held: list[int] = []
        expect = 1
        n = 1_000_000
        for s in range(1, n + 1):
            if s % 997 == 0:
                held.append(s)
            else:
                assert r.add(s, s)
            if held and s - held[0] >= 500:
                assert r.add(held[0], held.pop(0))
            got = r.remove_deliverable()
            if got:
                assert got[0] == expect
                expect += len(got)
                r.purge(r.hd)
        for h in held:
            r.add(h, h)
        assert len(r.remove_deliverable()) == n + 1 - expect
        assert r.capacity == cap and r._buf.__sizeof__() == buf_size
        assert r.hd == r.hr == n


# ====================================================================== property tests against dict models


class TableModel:
    def __init__(self, offset: int) -> None:
        self.items: dict[int, object] = {}
        self.low = self.hd = self.hr = offset

    def add(self, s: int, v: object) -> bool:
        if s <= self.hd or s in self.items:
            return False
        self.items[s] = v
        self.hr = max(self.hr, s)
        return True

    def remove_deliverable(self, max_count: int) -> list[object]:
        out = []
        while self.hd + 1 in self.items and (max_count <= 0 or len(out) < max_count):
            self.hd += 1
            out.append(self.items.pop(self.hd))
        self.low = self.hd
        return out

    def purge(self, s: int) -> int:
        if s <= self.low:
            return 0
        top = min(s, self.hr)
        gone = [k for k in self.items if k <= top]
        for k in gone:
            del self.items[k]
        self.hd = self.low = max(self.hd, top)
        return len(gone)

    def absent(self) -> list[int]:
        return [s for s in range(self.hd + 1, self.hr + 1) if s not in self.items]


SEQ = st.integers(-2, 30)
TABLE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), SEQ),
        st.tuples(st.just("batch"), st.lists(SEQ, max_size=6)),
        st.tuples(st.just("remove"), st.integers(-1, 4)),
        st.tuples(st.just("purge"), st.integers(-3, 35)),
        st.tuples(st.just("missing"), st.integers(-1, 5)),
    ),
    max_size=40,
)


def check_table(t: RetransmitTable, m: TableModel, offset: int) -> None:
    assert marks(t) == (m.low, m.hd, m.hr)
    assert t.low <= t.hd <= t.hr
    assert len(t) == len(m.items)
    for s in range(offset - 3, offset + 36):
        assert t.get(s) == m.items.get(s)
        assert (s in t) == (s in m.items)
    absent = m.absent()
    assert t.num_missing() == len(absent)
    assert t.missing() == ranges_of(absent)
    run = m.hd
    while run + 1 in m.items:
        run += 1
    assert t.highest_deliverable() == run
    assert t.items(offset - 3, offset + 36) == sorted(m.items.items())
    assert t.capacity() <= 2 * (t.hr - t.low)


@settings(max_examples=200, deadline=None)
@given(offset=st.integers(-3, 3), ops=TABLE_OPS)
def test_retransmit_table_matches_model(offset: int, ops: list[tuple[str, Any]]) -> None:
    t: RetransmitTable[tuple[int, int]] = RetransmitTable(offset)
    m = TableModel(offset)
    for step, (op, arg) in enumerate(ops):
        if op == "add":
            s = offset + arg
            assert t.add(s, (s, step)) == m.add(s, (s, step))
        elif op == "batch":
            pairs = [(offset + a, (offset + a, step)) for a in arg]
            assert t.add_batch(pairs) == sum(m.add(s, v) for s, v in pairs)
        elif op == "remove":
            assert t.remove_deliverable(arg) == m.remove_deliverable(arg)
        elif op == "purge":
            assert t.purge(offset + arg) == m.purge(offset + arg)
        else:
            absent = m.absent()
            assert t.missing(arg) == ranges_of(absent[:arg] if arg > 0 else absent)
        check_table(t, m, offset)


class RingModel:
    def __init__(self, capacity: int, offset: int) -> None:
        self.cap = capacity
        self.items: dict[int, object] = {}
        self.low = self.hd = self.hr = offset

    def add(self, s: int, v: object) -> bool:
        if not self.hd < s <= self.low + self.cap or s in self.items:
            return False
        self.items[s] = v
        self.hr = max(self.hr, s)
        return True

    def remove_deliverable(self, max_count: int) -> list[object]:
        out = []
        while self.hd + 1 in self.items and (max_count <= 0 or len(out) < max_count):
            self.hd += 1
            out.append(self.items[self.hd])
        return out

    def purge(self, s: int) -> int:
        top = min(s, self.hd)
        if top <= self.low:
            return 0
        gone = [k for k in self.items if k <= top]
        for k in gone:
            del self.items[k]
        self.low = top
        return len(gone)

    def mark_delivered(self, s: int) -> None:
        self.hd = max(self.hd, min(s, self.hr))

    def absent(self) -> list[int]:
        return [s for s in range(self.hd + 1, self.hr + 1) if s not in self.items]


RING_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), SEQ),
        st.tuples(st.just("remove"), st.integers(-1, 4)),
        st.tuples(st.just("purge"), st.integers(-3, 35)),
        st.tuples(st.just("mark"), st.integers(-3, 35)),
        st.tuples(st.just("missing"), st.integers(-1, 5)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(capacity=st.integers(1, 6), offset=st.integers(-3, 3), ops=RING_OPS)
def test_ring_buffer_matches_model(capacity: int, offset: int, ops: list[tuple[str, int]]) -> None:
    r: RingBuffer[tuple[int, int]] = RingBuffer(capacity, offset)
    m = RingModel(capacity, offset)
    for step, (op, arg) in enumerate(ops):
        s = offset + arg
        if op == "add":
            assert r.can_add(s) == (m.hd < s <= m.low + capacity and s not in m.items)
            assert r.add(s, (s, step)) == m.add(s, (s, step))
        elif op == "remove":
            assert r.remove_deliverable(arg) == m.remove_deliverable(arg)
        elif op == "purge":
            assert r.purge(s) == m.purge(s)
        elif op == "mark":
            r.mark_delivered(s)
            m.mark_delivered(s)
        else:
            absent = m.absent()
            assert r.missing(arg) == ranges_of(absent[:arg] if arg > 0 else absent)
        assert marks(r) == (m.low, m.hd, m.hr)
        assert r.low <= r.hd <= r.hr <= r.low + capacity
        assert len(r) == len(m.items)
        assert r.space() == m.low + capacity - m.hr
        for q in range(offset - 3, offset + 36):
            assert r.get(q) == m.items.get(q)
            assert (q in r) == (q in m.items)
        absent = m.absent()
        assert r.num_missing() == len(absent)
        assert r.missing() == ranges_of(absent)
        run = m.hd
        while run + 1 in m.items:
            run += 1
        assert r.highest_deliverable() == run
