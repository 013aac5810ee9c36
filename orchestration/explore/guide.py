"""The wire-guided search's corpus and mutations: schedules that reached something new (coverage.py's features,
from the wire and the histories) are kept, and later schedules are drawn from them by a small change, next to plain
random drawing.

`Guide.next_faults(rng)` gives a schedule's faults and where they came from ("random", or "shift of #3", ...); the
search hands the case's coverage back with `Guide.record`. Once the corpus holds something, MUTATE of the schedules
are mutations of a corpus entry, the rest random draws (so the search never narrows to what the corpus knows). An
entry is picked by its share of features nobody else reached (rarer is likelier), and by few earlier picks.

The mutations keep a schedule valid by touching only network faults (tables with `for`: partitions, splits, loss,
delay, duplication, reordering, discards); member actions stay where the generator put them (their plan of who is
down when holds):

- shift: a network fault earlier or later (within the generator's window);
- stretch: a network fault shorter or longer;
- drop: a network fault removed (when more than one fault is left);
- add: one more network move, drawn by the generator;
- swap: a network fault replaced by a newly drawn one;
- retarget: a discard aimed at a message type the wire showed on some link, or one such discard added (where the
  system has a wire profile chaosbed reads);
- tail: a cut of one link (a one-way partition, or a discard of that message type) over the end of a burst the wire
  showed on it (coverage.py's tails; the larger the burst, the likelier), in place of all the entry's network faults
  (TAIL_ALONE of the time: the cut alone is what is tried, nothing else failing beside it), in place of one, or added:
  the last messages of a burst are what a lost-last-message bug needs lost, and a random draw rarely covers them.
  Where the entry has tails, a mutation is a tail one with the chance TAIL_PICK (the other operators share the rest).

Near misses (pressure.py): a passing schedule that came closer to a bounded check's limit than any before it (its
pressure, at least PRESSURE_FLOOR of the bound, and higher than the best so far) is kept too, whether or not it
reached a new feature. Once the corpus holds one, PRESSURE_PICK of the mutations start from a near miss, the higher
its pressure the likelier (the best one most of all), so the search climbs towards the bound: a late delivery or a
control storm shows first as a run that nearly failed.

A guided search is not replayed from its seed alone (which schedule is mutated depends on the order results came
back in); every schedule's faults are in explore.json and a failure's minimal.toml, which replay as always.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from node.units import parse_duration
from orchestration.explore.coverage import Coverage, Tail
from orchestration.explore.fairness import unfair_leaves
from orchestration.explore.generator import Generator, Shape
from orchestration.explore.plan import secs, table
from orchestration.explore.tables import TomlTable

MUTATE = 0.6  # the share of schedules mutated from the corpus once it holds something
PRESSURE_FLOOR = 0.25  # a near miss pushed a bounded check to at least this share of its bound
PRESSURE_PICK = 0.5  # the share of mutations that start from a near miss, once there is one
NETWORK = frozenset({"partition", "split", "loss", "delay", "duplicate", "reorder", "discard"})
OPERATORS = ("shift", "stretch", "drop", "add", "swap", "retarget")
TAIL_PICK = 0.5  # the chance that a mutation of an entry with tails is a `tail` one
TAIL_ALONE = 0.5  # the chance that a tail's cut replaces all of the entry's network faults
TAIL_LEAD_S = (0.02, 0.3)  # the cut starts this long before the burst's last bin begins
TAIL_AFTER_S = (0.15, 1.5)  # and lasts this long after it
NOT_TARGETS = frozenset({"tcp", "DATA"})  # keys a discard cannot name
TRIES = 8


@dataclass
class Entry:
    faults: list[TomlTable]
    features: frozenset[str]
    targets: tuple[tuple[str, str, str], ...]
    picks: int = 0
    pressure: float = 0.0  # how close it came to a bounded check's limit (pressure.py)
    tails: tuple[Tail, ...] = ()  # where bursts ended on the wire (coverage.py)


@dataclass
class Guide:
    generator: Generator
    mutate: float = MUTATE
    near: bool = True  # keep and mutate near misses (False: features alone, as bench_explore_guided compares)
    seen: Counter[str] = field(default_factory=Counter)  # feature -> schedules that reached it
    corpus: list[Entry] = field(default_factory=list)
    origins: Counter[str] = field(default_factory=Counter)  # what the kept entries came from
    drawn: Counter[str] = field(default_factory=Counter)  # schedules handed out: random, or by operator
    best: float = 0.0  # the highest pressure a passing schedule reached: the nearest miss
    near_misses: int = 0  # entries kept for their pressure alone

    def next_faults(self, rng: random.Random) -> tuple[list[TomlTable], str]:
        """The faults of the next schedule and their origin."""
        if self.corpus and rng.random() < self.mutate:
            near = [i for i, e in enumerate(self.corpus) if e.pressure >= PRESSURE_FLOOR] if self.near else []
            i = self._pick_near(rng, near) if near and rng.random() < PRESSURE_PICK else self._pick(rng)
            entry = self.corpus[i]
            entry.picks += 1
            for _ in range(TRIES):
                op = "tail" if entry.tails and rng.random() < TAIL_PICK else rng.choice(OPERATORS)
                faults = mutate(self.generator, rng, entry, op)
                if faults is not None and faults != entry.faults:
                    self.drawn[op] += 1
                    return faults, f"{op} of #{i + 1}"
        self.drawn["random"] += 1
        return self.generator.draw(rng), "random"

    def record(self, faults: list[TomlTable], coverage: Coverage, origin: str = "random", pressure: float = 0.0) -> int:
        """Counts a finished schedule's features; keeps it in the corpus if it reached a new one, or if it is a near
        miss that pushed a bound harder than any schedule before it. Returns how many features were new."""
        new = [f for f in coverage.features if f not in self.seen]
        self.seen.update(coverage.features)
        nearer = self.near and PRESSURE_FLOOR <= pressure < 1.0 and pressure > self.best
        if pressure < 1.0:
            self.best = max(self.best, pressure)
        if new or nearer:
            entry = Entry([dict(f) for f in faults], coverage.features, coverage.targets, pressure=pressure,
                          tails=coverage.tails)  # fmt: skip
            self.corpus.append(entry)
            self.origins[origin.split(" ", 1)[0]] += 1
            self.near_misses += not new
        return len(new)

    def _pick(self, rng: random.Random) -> int:
        weights = [
            (1.0 + sum(1.0 / self.seen[f] for f in e.features if self.seen[f])) / (1.0 + e.picks) for e in self.corpus
        ]
        return rng.choices(range(len(self.corpus)), weights)[0]

    def _pick_near(self, rng: random.Random, near: list[int]) -> int:
        """A near miss, by its pressure relative to the best one's (steeply: the best is mutated most), and less the
        more often it was picked."""
        top = max(self.corpus[i].pressure for i in near)
        weights = [(self.corpus[i].pressure / top) ** 4 / (1.0 + self.corpus[i].picks) ** 0.5 for i in near]
        return near[rng.choices(range(len(near)), weights)[0]]


def _at(f: TomlTable) -> float:
    return parse_duration(str(f.get("at", "0s")))


def _for(f: TomlTable) -> float:
    return parse_duration(str(f["for"]))


def _network(faults: list[TomlTable]) -> list[int]:
    return [i for i, f in enumerate(faults) if f.get("kind") in NETWORK and "for" in f]


def mutate(generator: Generator, rng: random.Random, entry: Entry, op: str) -> list[TomlTable] | None:
    """The entry's faults changed by one operator (None: the operator does not apply to them)."""
    faults = [dict(f) for f in entry.faults]
    net = _network(faults)
    w0, w1 = generator.window()
    if op in ("shift", "stretch", "drop", "swap") and not net:
        return None
    if op == "shift":
        f = faults[rng.choice(net)]
        d = _for(f)
        f["at"] = secs(min(max(w0, _at(f) + rng.uniform(-1.0, 1.0) * max(0.3, d)), max(w0, w1 - d)))
    elif op == "stretch":
        f = faults[rng.choice(net)]
        f["for"] = secs(min(max(0.05, _for(f) * rng.uniform(0.4, 2.5)), max(0.05, w1 - _at(f))))
    elif op == "drop":
        if len(faults) < 2:
            return None
        del faults[rng.choice(net)]
    elif op == "add":
        faults += _network_move(generator, rng)
    elif op == "swap":
        del faults[rng.choice(net)]
        faults += _network_move(generator, rng)
    elif op == "retarget":
        if not _retarget(generator, rng, entry, faults):
            return None
    elif op == "tail" and not _tail(generator, rng, entry, faults, net):
        return None
    for i in reversed(unfair_leaves(faults, generator.ctx)):
        del faults[i]
    return sorted(faults, key=_at)


def _network_move(generator: Generator, rng: random.Random) -> list[TomlTable]:
    """One move of network faults only, drawn by the generator (a member action would need the plan of the rest)."""
    kinds = {k: w for k, w in generator.weights.items() if k in NETWORK or k in _NETWORK_ROUNDS}
    if not kinds:
        return []
    one = Generator(generator.ctx, kinds, Shape(moves=(1, 1), window=generator.window()))
    for _ in range(TRIES):
        faults = one.draw(rng)
        if faults and all(f.get("kind") in NETWORK for f in faults):
            return faults
    return []


_NETWORK_ROUNDS = frozenset({"isolate-one", "one-way-isolate", "random-halves", "majority-ring", "bridge", "flapping"})


def _retarget(generator: Generator, rng: random.Random, entry: Entry, faults: list[TomlTable]) -> bool:
    """Aims a discard (an existing one, or a new one) at a (sender, receiver, message type) the wire showed."""
    ctx = generator.ctx
    if not _draws_discards(generator):
        return False
    targets = [t for t in entry.targets if _aimable(t[2], ctx.wire)]
    if not targets:
        return False
    src, dst, key = rng.choice(targets)
    discards = [i for i, f in enumerate(faults) if f.get("kind") == "discard"]
    if discards and rng.random() < 0.7:
        f = faults[rng.choice(discards)]
    else:
        w0, w1 = generator.window()
        d = rng.uniform(0.2, min(3.0, max(0.2, w1 - w0)))
        f = {"at": secs(rng.uniform(w0, max(w0, w1 - d))), "kind": "discard", "for": secs(d)}
        if rng.random() < 0.5:
            f["count"] = rng.randint(1, 3)
        faults.append(f)
    f["match"], f["from"], f["to"] = f"{key}()", [src], [dst]
    return True


def _tail(generator: Generator, rng: random.Random, entry: Entry, faults: list[TomlTable], net: list[int]) -> bool:
    """Cuts one link over the end of a burst the wire showed on it (a larger burst likelier): a one-way partition,
    or (where discards are drawn and the type is nameable) a discard of that type; in place of every network fault
    (TAIL_ALONE), of one (half the rest), or added."""
    ctx = generator.ctx
    w0, w1 = generator.window()
    tails = [t for t in entry.tails if t[0] in ctx.members and w0 <= t[3] < w1]
    if not tails:
        return False
    src, dst, key, t, _ = rng.choices(tails, [tail[4] for tail in tails])[0]
    peers = [m for m in ctx.members if m != src]
    to = [dst] if dst in peers else [rng.choice(peers)]  # a multicast's burst: cut it to one receiver
    at = max(w0, t - rng.uniform(*TAIL_LEAD_S))
    d = min(t - at + rng.uniform(*TAIL_AFTER_S), max(0.05, w1 - at))
    if _draws_discards(generator) and _aimable(key, ctx.wire) and rng.random() < 0.5:
        f = table("discard", at, d, match=f"{key}()", **{"from": [src], "to": to})
    elif "partition" in generator.weights:
        f = table("partition", at, d, **{"from": [src], "to": to, "one_way": True})
    else:
        return False
    if net and rng.random() < TAIL_ALONE:
        for i in reversed(net):
            del faults[i]
    elif net and rng.random() < 0.5:
        del faults[rng.choice(net)]
    faults.append(f)
    return True


def _draws_discards(generator: Generator) -> bool:
    return generator.ctx.discards and "discard" in generator.weights


def _aimable(key: str, wire_name: str) -> bool:
    """A discard can name this message type."""
    return key not in NOT_TARGETS and _nameable(key, wire_name)


def _nameable(key: str, wire_name: str) -> bool:
    from chaos.profiles import parse_match
    from chaos.rules import RuleError

    try:
        parse_match(f"{key}()", wire_name)
    except (RuleError, ValueError, KeyError):
        return False
    return True
