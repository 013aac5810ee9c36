"""The one source of random fault schedules: `explore`, its shrinker's tests and the suite's property tests draw
their schedules here.

`Generator(context, kinds, shape).draw(rng)` returns `[[faults]]` tables in the scenario-file format
(docs/scenario-format.md), so a schedule is just a scenario: the base scenario with these faults. Every random choice
comes from the `rng` given (a `random.Random`; never the global generator): explore seeds one per schedule, so the
same seed gives the same schedule on every machine, and the property tests pass hypothesis' `st.randoms()`, which
lets hypothesis drive and shrink the choices.

A schedule is 1-4 moves (Shape.moves), each one round of faults of one kind (KINDS; `--nemesis` picks some) that
starts at `at` and is over `d` later: `layout` "overlap" places moves independently (they may overlap), "rounds" one
after another with a gap, "mixed" either, per schedule. Every fault heals by itself (`for`, restart, resume) within
the window, whose end (the context's horizon) leaves the views time to converge before the scenario's timeout.
Where discards are drawn, a move comes at times with a companion discard of the messages it makes matter
(companions.py: the first DATA after a close, the VIEW of a leave, MERGE.INFO across a split, ...).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from chaos import nemesis
from node.units import parse_duration
from orchestration.explore import actions, discards, moves
from orchestration.explore.companions import companion
from orchestration.explore.context import Context
from orchestration.explore.fairness import unfair_leaves
from orchestration.explore.plan import Plan
from orchestration.explore.tables import TomlTable

KINDS: dict[str, str] = {
    "partition": "random sets that do not hear each other (one way or both), or a set of one-way link cuts",
    "split": "2-3 random groups (sometimes with a member deaf to one of its own group)",
    "overlap": "overlapping groups: one member in two groups hears both, they do not hear each other",
    **{k: nemesis.KINDS[k] for k in moves.NEMESIS_ROUNDS},
    "loss": "random packet loss on random links",
    "delay": "added latency (and jitter) on random links",
    "duplicate": "duplicated packets on random links",
    "reorder": "reordered packets on random links",
    "discard": "protocol-aware rules on the stack's own message types (node/wire.py), e.g. UNICAST3.ACK(seqno=20)",
    "kill": "a member is killed, and restarted after the round (or, at times, never)",
    "kill-restart": nemesis.KINDS["kill-restart"],
    "pause": "a member is paused, and resumed after the round (or never, where nothing is owed to it)",
    "pause-resume": nemesis.KINDS["pause-resume"],
    "leave": "a member (the coordinator half the time) leaves the group gracefully",
    "close-connection": "a member closes its unicast connection to a peer (at times both ends)",
}

WEIGHTS: dict[str, float] = {
    "partition": 2.0, "split": 2.0, "overlap": 1.0, "isolate-one": 1.0, "one-way-isolate": 1.0, "random-halves": 1.0,
    "majority-ring": 1.0, "bridge": 1.0, "flapping": 1.0, "loss": 1.5, "delay": 1.0, "duplicate": 1.0,
    "reorder": 1.0, "discard": 4.0, "kill": 1.0, "kill-restart": 0.5, "pause": 1.0, "pause-resume": 0.5,
    "leave": 0.7, "close-connection": 1.5,
}  # fmt: skip

MOVES: dict[str, moves.Move] = {
    "partition": moves.partition,
    "split": moves.split,
    "overlap": moves.overlap,
    **{k: moves.nemesis_round(k) for k in moves.NEMESIS_ROUNDS},
    "loss": moves.link_fault("loss"),
    "delay": moves.link_fault("delay"),
    "duplicate": moves.link_fault("duplicate"),
    "reorder": moves.link_fault("reorder"),
    "discard": discards.discard,
    "kill": actions.kill,
    "kill-restart": actions.nemesis_action("kill-restart"),
    "pause": actions.pause,
    "pause-resume": actions.nemesis_action("pause-resume"),
    "leave": actions.leave,
    "close-connection": actions.close_connection,
}
assert set(KINDS) == set(WEIGHTS) == set(MOVES)

LAYOUTS = ("overlap", "rounds", "mixed")
COMPANION = 0.3  # the chance that a move comes with a companion discard (companions.py; when discards are drawn)
# Over tcp the simulator still moves datagrams: what a real member's TCP connection would retransmit (a packet lost
# to a partition, to loss, to a discard rule) the simulator loses for good, so only faults that drop nothing are
# drawn there: delay and member actions (a simulator parity gap, docs/explore.md).
TCP_KINDS = frozenset({"delay", "kill", "kill-restart", "pause", "pause-resume", "leave", "close-connection"})
TRIES = 4  # draws of a move that came out empty (no free victim, no valid link) before it is left out


class GeneratorError(ValueError):
    """Kinds that cannot make a schedule here: an unknown kind, or none that the cluster allows."""


@dataclass(frozen=True)
class Shape:
    """How many moves a schedule has, how long each lasts (seconds, drawn log-uniformly), how they are laid out and
    the window they fit in ((earliest start, latest end); None: the context's workload start and horizon)."""

    moves: tuple[int, int] = (1, 4)
    duration: tuple[float, float] = (0.1, 5.0)
    layout: str = "mixed"
    gaps: tuple[float, ...] = (0.0, 0.3, 1.0, 3.0)
    window: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise GeneratorError(f"layout must be one of {', '.join(LAYOUTS)}, not {self.layout!r}")
        if not 0 <= self.moves[0] <= self.moves[1]:
            raise GeneratorError(f"moves must be (low, high) with 0 <= low <= high, not {self.moves}")
        if not 0 < self.duration[0] <= self.duration[1]:
            raise GeneratorError(f"duration must be (low, high) with 0 < low <= high, not {self.duration}")


def parse_kinds(text: str) -> list[str]:
    """`--nemesis KINDS`: kinds separated by commas ("all": every kind; "combined": every chaos/nemesis.py kind)."""
    out: list[str] = []
    for item in (p.strip() for p in text.split(",")):
        if item == "all":
            out += list(KINDS)
        elif item == "combined":
            out += [*moves.NEMESIS_ROUNDS, "kill-restart", "pause-resume"]
        elif item in KINDS:
            out.append(item)
        else:
            raise GeneratorError(f"unknown kind {item!r}; kinds: {', '.join(KINDS)} (or all, combined)")
    return list(dict.fromkeys(out))


def applicable(ctx: Context, kind: str) -> bool:
    """Whether the cluster allows the kind: enough members, a membership stack for leaves, datagrams for faults that
    drop packets, crashes that converge within the views' bound for kills."""
    n = len(ctx.members)
    if not ctx.udp and kind not in TCP_KINDS and not (ctx.real and kind != "discard"):
        return False  # on real members over tcp the kernel repairs what a fault drops: only discards are left out
    if kind == "close-connection" and not ctx.native:
        return False  # it asks chaosbed's own unicast protocol to close a connection
    if kind in nemesis.MIN_MEMBERS:
        need = nemesis.MIN_MEMBERS[kind]
        if kind in ("kill-restart", "pause-resume"):
            need = 2
        if n < need:
            return False
    need = {"overlap": 3, "leave": 2}.get(kind, 2)
    if n < need:
        return False
    if kind in ("kill", "kill-restart"):
        return ctx.crashes_converge
    if kind == "leave":
        return ctx.membership
    if kind == "discard":
        return ctx.discards
    return True


class Generator:
    """Draws schedules over one context. `kinds`: names (equal weights), a mapping of name -> weight, or None (every
    kind, weighted by WEIGHTS); kinds the cluster does not allow are left out."""

    def __init__(
        self, ctx: Context, kinds: Iterable[str] | Mapping[str, float] | None = None, shape: Shape | None = None
    ) -> None:
        self.ctx = ctx
        self.shape = shape or Shape()
        if kinds is None:
            asked = dict(WEIGHTS)
        elif isinstance(kinds, Mapping):
            asked = dict(kinds)
        else:
            asked = dict.fromkeys(kinds, 1.0)
        unknown = [k for k in asked if k not in KINDS]
        if unknown:
            raise GeneratorError(f"unknown kind {unknown[0]!r}; kinds: {', '.join(KINDS)}")
        self.weights = {k: w for k, w in asked.items() if w > 0 and applicable(ctx, k)}
        if not self.weights:
            raise GeneratorError(
                f"none of the kinds {', '.join(asked)} can run on {len(ctx.members)} member(s) of stack {ctx.stack} "
                f"over {ctx.transport}"
            )
        self.kinds = sorted(self.weights)

    def window(self) -> tuple[float, float]:
        return self.shape.window or (self.ctx.start, self.ctx.horizon)

    def draw(self, rng: random.Random) -> list[TomlTable]:
        """One schedule: fault tables sorted by `at` (moves of the same instant in the order drawn)."""
        shape = self.shape
        plan = Plan(self.ctx)
        layout = shape.layout if shape.layout != "mixed" else rng.choice(["overlap", "rounds"])
        w0, w1 = self.window()
        lo, hi = shape.duration
        weights = [self.weights[k] for k in self.kinds]
        t = w0
        out: list[TomlTable] = []
        for _ in range(rng.randint(*shape.moves)):
            if layout == "overlap":
                t = rng.uniform(w0, max(w0, w1 - lo))
            if w1 - t < lo:
                break
            d = _log_uniform(rng, lo, min(hi, w1 - t))
            faults: list[TomlTable] = []
            for _ in range(TRIES):
                faults = MOVES[rng.choices(self.kinds, weights)[0]](rng, self.ctx, plan, t, d)
                if faults:
                    break
            out += faults
            if faults and "discard" in self.weights and ctx_companions(self.ctx) and rng.random() < COMPANION:
                out += companion(rng, self.ctx, faults, d)
            if layout == "rounds":
                t = t + d + rng.choice(shape.gaps)
        for i in reversed(unfair_leaves(out, self.ctx)):  # a leave that a partition drawn later makes unfair
            del out[i]
        return sorted(out, key=lambda f: parse_duration(f["at"]))


def ctx_companions(ctx: Context) -> bool:
    """Companion discards name chaosbed's own headers (MERGE.INFO, GMS.VIEW, UNICAST*.DATA): its wire only."""
    return ctx.wire == "chaosbed"


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    if hi <= lo:
        return lo
    if math.isinf(hi):
        hi = lo * 1000
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))
