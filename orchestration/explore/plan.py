"""A schedule being drawn: when each member is taken out by a member action (killed, paused, gone after a leave),
so that every action the generator draws can be carried out (a member is killed only while it runs, a paused member
is not sent a workload command, enough members stay up), and the helpers that write fault tables."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from orchestration.explore.context import Context
from orchestration.explore.tables import TomlTable

MARGIN = 0.05  # seconds kept free around a member action (a restart right after a kill of the same member is fine)
FOREVER = math.inf


def secs(x: float) -> str:
    """A time as a scenario-file duration, to the millisecond: 2.5 -> "2.5s", 3.0 -> "3s"."""
    r = round(x, 3)
    return f"{int(r)}s" if r == int(r) else f"{r!r}s"


@dataclass
class Plan:
    """Member actions drawn so far, as busy intervals per member."""

    ctx: Context
    busy: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # out: killed, paused, left
    touched: dict[str, list[float]] = field(default_factory=dict)  # instants it must be up (closes a connection)

    def free(self, member: str, t0: float, t1: float) -> bool:
        """Whether the member runs undisturbed from t0 to t1: it is not out then, and no instant at which it must be
        up falls in it."""
        spans = all(t1 + MARGIN <= a or t0 >= b + MARGIN for a, b in self.busy.get(member, []))
        return spans and all(not t0 - MARGIN <= t <= t1 + MARGIN for t in self.touched.get(member, []))

    def touch(self, member: str, t: float) -> None:
        """The member must be up (running, not paused) at t."""
        self.touched.setdefault(member, []).append(t)

    def down(self, t0: float, t1: float) -> int:
        """How many members are taken out at some time in [t0, t1]."""
        return sum(1 for spans in self.busy.values() if any(a < t1 and b > t0 for a, b in spans))

    def room(self, t0: float, t1: float) -> bool:
        """Whether one more member may be out from t0 to t1: at least two stay up (one with two members)."""
        n = len(self.ctx.members)
        return self.down(t0, t1) < max(1, n - 2)

    def take(self, member: str, t0: float, t1: float) -> None:
        self.busy.setdefault(member, []).append((t0, t1))

    def pick(self, rng: random.Random, candidates: list[str], t0: float, t1: float) -> str | None:
        """A random candidate free from t0 to t1 (None: none is, or no room for another member out)."""
        if not self.room(t0, t1):
            return None
        free = [m for m in candidates if self.free(m, t0, t1)]
        return rng.choice(free) if free else None


def table(kind: str, at: float, duration: float | None = None, **keys: object) -> TomlTable:
    """One `[[faults]]` table: `at`, `kind`, the keys in the order given, then `for`."""
    out: TomlTable = {"at": secs(at), "kind": kind, **keys}
    if duration is not None:
        out["for"] = secs(duration)
    return out


def subset(rng: random.Random, names: list[str], lo: int = 1, hi: int | None = None) -> list[str]:
    """A random non-empty subset, in the cluster's order."""
    hi = len(names) if hi is None else min(hi, len(names))
    k = rng.randint(min(lo, hi), hi)
    chosen = set(rng.sample(names, k))
    return [n for n in names if n in chosen]
