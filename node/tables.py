"""Seqno-indexed message windows for the reliable-messaging protocols (standard library only).

Two tables, both keeping three watermarks ``low <= hd <= hr``:

- ``low``: every seqno <= low is gone (freed).
- ``hd``: highest delivered (receiver) / highest acked or sent-and-marked (sender).
- ``hr``: highest received (receiver) / highest sent (sender).

:class:`RetransmitTable` grows with the window (UNICAST3, UNICAST2, NAKACK2; the counterpart of JGroups'
``Table``); :class:`RingBuffer` has a fixed capacity allocated once (MCAST, whose fixed window is its flow control).

Neither table locks: the protocols are sans-IO state machines and whoever drives them serialises access.
Items are stored as-is and ``None`` marks an empty slot, so ``None`` cannot be stored (``ValueError``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Generic, TypeVar

__all__ = ["RetransmitTable", "RingBuffer"]

T = TypeVar("T")


def _no_none() -> ValueError:
    return ValueError("None cannot be stored in a table (None marks an empty slot)")


class RetransmitTable(Generic[T]):
    """A growable window of items indexed by seqno, used as a sender window and as a receiver window.

    Seqnos start at ``offset + 1``. Both ways of taking items out forget them: the receiver's
    :meth:`remove_deliverable` and the sender's cumulative-ack :meth:`purge` move ``hd`` and ``low`` together, so in
    this table ``low == hd`` always (both are exposed because the protocols speak of both). Every stored item is
    therefore in ``(hd, hr]``, and ``num_missing() == hr - hd - len(self)``.

    Storage is a list of slots, ``_buf[i]`` holding seqno ``_base + i`` (``None`` when absent), whose last slot is
    always ``hr``. The dead prefix (seqnos <= low, all ``None``) is dropped once it is more than half of the list, so
    ``capacity() <= 2 * (hr - low)`` after every purge/remove and memory follows the window, not the total ever added.
    ``add``/``get`` are O(1) amortised; ``purge``/``remove_deliverable`` are O(seqnos passed) amortised;
    ``missing`` is O(window). A seqno far ahead of ``hr`` is accepted and allocates slots up to it: callers that
    take seqnos from the network should bound them.
    """

    __slots__ = ("_base", "_buf", "_hd", "_hr", "_size")

    def __init__(self, offset: int = 0) -> None:
        self._buf: list[T | None] = []
        self._base = offset + 1  # seqno held by _buf[0]
        self._hd = offset  # also `low`
        self._hr = offset
        self._size = 0

    # ------------------------------------------------------------------ watermarks

    @property
    def low(self) -> int:
        """Everything <= low is gone. Always equal to :attr:`hd` in this table."""
        return self._hd

    @property
    def hd(self) -> int:
        """Highest delivered (receiver) / highest acked (sender)."""
        return self._hd

    @property
    def hr(self) -> int:
        """Highest received (receiver) / highest sent (sender)."""
        return self._hr

    # ------------------------------------------------------------------ adding

    def add(self, seqno: int, item: T) -> bool:
        """Store ``item`` at ``seqno``; False (and no change) if seqno <= hd or already present."""
        if item is None:
            raise _no_none()
        if seqno <= self._hd:
            return False
        buf = self._buf
        idx = seqno - self._base
        n = len(buf)
        if idx < n:
            if buf[idx] is not None:
                return False
            buf[idx] = item
        else:
            if idx > n:
                buf.extend(repeat(None, idx - n))
            buf.append(item)
            self._hr = seqno
        self._size += 1
        return True

    def add_batch(self, items: Iterable[tuple[int, T]]) -> int:
        """Add each ``(seqno, item)`` with the rules of :meth:`add`; returns how many were added.

        A ``None`` item raises ``ValueError``; the pairs before it stay added.
        """
        buf = self._buf
        base = self._base
        hd = self._hd
        added = 0
        try:
            for seqno, item in items:
                if item is None:
                    raise _no_none()
                if seqno <= hd:
                    continue
                idx = seqno - base
                n = len(buf)
                if idx < n:
                    if buf[idx] is not None:
                        continue
                    buf[idx] = item
                else:
                    if idx > n:
                        buf.extend(repeat(None, idx - n))
                    buf.append(item)
                added += 1
        finally:
            self._size += added
            self._hr = base + len(buf) - 1
        return added

    # ------------------------------------------------------------------ reading

    def get(self, seqno: int) -> T | None:
        """The item at ``seqno``, or None if absent (never received, or already removed/purged)."""
        if self._hd < seqno <= self._hr:
            return self._buf[seqno - self._base]
        return None

    def __contains__(self, seqno: int) -> bool:
        return self._hd < seqno <= self._hr and self._buf[seqno - self._base] is not None

    def __len__(self) -> int:
        """Number of items stored (not the span ``hr - low``)."""
        return self._size

    def items(self, first: int, last: int) -> list[tuple[int, T]]:
        """The present items with ``first <= seqno <= last``, ascending (e.g. to answer a retransmit request)."""
        base = self._base
        buf = self._buf
        lo = max(first, self._hd + 1)
        hi = min(last, self._hr)
        if lo > hi:
            return []
        pairs = zip(range(lo, hi + 1), buf[lo - base : hi + 1 - base], strict=True)
        return [(s, x) for s, x in pairs if x is not None]

    def capacity(self) -> int:
        """Slots currently allocated by the storage."""
        return len(self._buf)

    # ------------------------------------------------------------------ delivery

    def highest_deliverable(self) -> int:
        """``hd`` plus the length of the run of present items starting at ``hd + 1``."""
        buf = self._buf
        i = self._hd + 1 - self._base
        n = len(buf)
        while i < n and buf[i] is not None:
            i += 1
        return self._base + i - 1

    def remove_deliverable(self, max_count: int = 0) -> list[T]:
        """Remove and return the run of items from ``hd + 1`` (at most ``max_count`` if > 0); hd = low = past them."""
        buf = self._buf
        start = i = self._hd + 1 - self._base
        end = len(buf)
        if max_count > 0 and start + max_count < end:
            end = start + max_count
        out: list[T] = []
        append = out.append
        while i < end:
            x = buf[i]
            if x is None:
                break
            append(x)
            buf[i] = None
            i += 1
        if out:
            self._hd += i - start
            self._size -= i - start
            self._compact()
        return out

    def purge(self, seqno: int) -> int:
        """Cumulative ack: remove every item <= min(seqno, hr); hd = low = that. Returns how many were removed."""
        hd = self._hd
        hr = self._hr
        new = seqno if seqno < hr else hr
        if new <= hd:
            return 0
        if new == hr:  # everything goes: the usual case for a sender whose receiver has caught up
            removed = self._size
            self._buf.clear()
            self._base = hr + 1
            self._size = 0
            self._hd = hr
            return removed
        buf = self._buf
        base = self._base
        removed = 0
        for i in range(hd + 1 - base, new + 1 - base):
            if buf[i] is not None:
                buf[i] = None
                removed += 1
        self._hd = new
        self._size -= removed
        self._compact()
        return removed

    def _compact(self) -> None:
        """Drop the dead prefix (seqnos <= low) once it is more than half of the list."""
        dead = self._hd + 1 - self._base
        if dead * 2 > len(self._buf):
            del self._buf[:dead]
            self._base += dead

    # ------------------------------------------------------------------ gaps

    def missing(self, max_count: int = 0) -> list[tuple[int, int]]:
        """Inclusive ranges ``(first, last)`` of absent seqnos in ``(hd, hr]``, ascending.

        With ``max_count > 0`` at most that many seqnos in total (the last range is cut short).
        """
        hd = self._hd
        span = self._hr - hd
        return _missing_ranges(self._buf, hd + 1 - self._base, hd + 1, span, span - self._size, max_count)

    def num_missing(self) -> int:
        """Absent seqnos in ``(hd, hr]``, in O(1)."""
        return self._hr - self._hd - self._size

    def __repr__(self) -> str:
        return (
            f"RetransmitTable(low={self._hd}, hd={self._hd}, hr={self._hr}, size={self._size}, "
            f"missing={self.num_missing()}, capacity={len(self._buf)})"
        )


def _missing_ranges(
    buf: Sequence[object], i: int, first_seqno: int, span: int, to_find: int, max_count: int
) -> list[tuple[int, int]]:
    """Ranges of absent seqnos among the ``span`` seqnos from ``first_seqno`` (held at ``buf[i]``, wrapping at the end).

    ``to_find`` is how many absent ones there are: the scan stops at the last of them (or at ``max_count``).
    """
    if 0 < max_count < to_find:
        to_find = max_count
    out: list[tuple[int, int]] = []
    if to_find <= 0:
        return out
    append = out.append
    n = len(buf)
    first = 0
    in_gap = False
    end = first_seqno + span
    for seqno in range(first_seqno, end):
        if buf[i] is None:
            if not in_gap:
                first = seqno
                in_gap = True
            to_find -= 1
            if to_find == 0:
                append((first, seqno))
                return out
        elif in_gap:
            append((first, seqno - 1))
            in_gap = False
        i += 1
        if i == n:
            i = 0
    if in_gap:  # only reachable if to_find overstated the gaps
        append((first, end - 1))
    return out


class RingBuffer(Generic[T]):
    """A fixed-capacity window over seqnos, ``(low, low + capacity]``, memory allocated once (MCAST).

    Seqno ``s`` lives in slot ``s % capacity``. Unlike :class:`RetransmitTable`, delivery and freeing are separate:
    :meth:`remove_deliverable` (receiver) or :meth:`mark_delivered` (sender) move ``hd``, and :meth:`purge` frees
    slots up to at most ``hd``, moving ``low``: a receiver may purge right away, a sender purges on the minimum ack
    over all members. A receiver drops what falls outside the window; a sender checks :meth:`can_add` and blocks.
    """

    __slots__ = ("_buf", "_cap", "_hd", "_hr", "_low", "_missing", "_size")

    def __init__(self, capacity: int, offset: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, not {capacity}")
        self._cap = capacity
        self._buf: list[T | None] = [None] * capacity
        self._low = offset
        self._hd = offset
        self._hr = offset
        self._size = 0  # items stored, in (low, hr]
        self._missing = 0  # absent seqnos in (hd, hr]

    # ------------------------------------------------------------------ watermarks

    @property
    def capacity(self) -> int:
        """Number of slots (the window size)."""
        return self._cap

    @property
    def low(self) -> int:
        """Everything <= low is freed; the window is ``(low, low + capacity]``."""
        return self._low

    @property
    def hd(self) -> int:
        """Highest delivered (receiver) / highest marked delivered (sender)."""
        return self._hd

    @property
    def hr(self) -> int:
        """Highest received (receiver) / highest sent (sender)."""
        return self._hr

    # ------------------------------------------------------------------ adding

    def can_add(self, seqno: int) -> bool:
        """True if ``hd < seqno <= low + capacity`` and seqno is not present."""
        return self._hd < seqno <= self._low + self._cap and self._buf[seqno % self._cap] is None

    def add(self, seqno: int, item: T) -> bool:
        """Store ``item`` at ``seqno``; False if outside the window, <= hd, or already present."""
        if item is None:
            raise _no_none()
        if not self._hd < seqno <= self._low + self._cap:
            return False
        buf = self._buf
        idx = seqno % self._cap
        if buf[idx] is not None:
            return False
        buf[idx] = item
        self._size += 1
        hr = self._hr
        if seqno > hr:
            self._missing += seqno - hr - 1
            self._hr = seqno
        else:
            self._missing -= 1
        return True

    def space(self) -> int:
        """How many more seqnos past hr fit in the window: ``low + capacity - hr``."""
        return self._low + self._cap - self._hr

    # ------------------------------------------------------------------ reading

    def get(self, seqno: int) -> T | None:
        """The item at ``seqno`` if stored (delivered-but-unpurged items included), else None."""
        if self._low < seqno <= self._hr:
            return self._buf[seqno % self._cap]
        return None

    def __contains__(self, seqno: int) -> bool:
        return self._low < seqno <= self._hr and self._buf[seqno % self._cap] is not None

    def __len__(self) -> int:
        """Number of items stored, in ``(low, hr]``."""
        return self._size

    # ------------------------------------------------------------------ delivery

    def highest_deliverable(self) -> int:
        """``hd`` plus the length of the run of present items starting at ``hd + 1``."""
        buf = self._buf
        cap = self._cap
        s = self._hd + 1
        hr = self._hr
        i = s % cap
        while s <= hr and buf[i] is not None:
            s += 1
            i += 1
            if i == cap:
                i = 0
        return s - 1

    def remove_deliverable(self, max_count: int = 0) -> list[T]:
        """Return the run of items from ``hd + 1`` (at most ``max_count`` if > 0) and move hd past it.

        The slots stay occupied until :meth:`purge` frees them.
        """
        buf = self._buf
        cap = self._cap
        hd = self._hd
        last = self._hr
        if max_count > 0 and hd + max_count < last:
            last = hd + max_count
        s = hd + 1
        i = s % cap
        out: list[T] = []
        append = out.append
        while s <= last:
            x = buf[i]
            if x is None:
                break
            append(x)
            s += 1
            i += 1
            if i == cap:
                i = 0
        self._hd = s - 1
        return out

    def mark_delivered(self, seqno: int) -> None:
        """Sender side: ``hd = max(hd, min(seqno, hr))`` (a sender delivers its own messages as it sends them)."""
        hd = self._hd
        new = seqno if seqno < self._hr else self._hr
        if new <= hd:
            return
        if self._missing:
            buf = self._buf
            cap = self._cap
            absent = 0
            for s in range(hd + 1, new + 1):
                if buf[s % cap] is None:
                    absent += 1
            self._missing -= absent
        self._hd = new

    def purge(self, seqno: int) -> int:
        """Free the slots <= min(seqno, hd) and set low to that; returns how many items were freed. Never passes hd."""
        low = self._low
        new = seqno if seqno < self._hd else self._hd
        if new <= low:
            return 0
        buf = self._buf
        cap = self._cap
        freed = 0
        i = (low + 1) % cap
        for _ in range(new - low):
            if buf[i] is not None:
                buf[i] = None
                freed += 1
            i += 1
            if i == cap:
                i = 0
        self._low = new
        self._size -= freed
        return freed

    # ------------------------------------------------------------------ gaps

    def missing(self, max_count: int = 0) -> list[tuple[int, int]]:
        """Inclusive ranges ``(first, last)`` of absent seqnos in ``(hd, hr]``, ascending.

        With ``max_count > 0`` at most that many seqnos in total (the last range is cut short).
        """
        s = self._hd + 1
        return _missing_ranges(self._buf, s % self._cap, s, self._hr - self._hd, self._missing, max_count)

    def num_missing(self) -> int:
        """Absent seqnos in ``(hd, hr]``, in O(1)."""
        return self._missing

    def __repr__(self) -> str:
        return (
            f"RingBuffer(capacity={self._cap}, low={self._low}, hd={self._hd}, hr={self._hr}, size={self._size}, "
            f"missing={self._missing})"
        )
