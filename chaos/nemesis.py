"""Nemeses: seeded fault schedules in the manner of Jepsen's (isolate one member, random halves, majorities ring,
bridge, one-way isolation, a flapping link, kill/restart, pause/resume, or a mix).

`schedule(kind, members, seed=..., start=..., interval=..., duration=..., rounds=...)` returns raw fault tables in
the scenario-file format (docs/scenario-format.md, `[[faults]]`: `at` and `for` as strings like "2.5s"), so the
runner applies and logs them exactly like hand-written faults. Scenario files ask for them with `[[nemesis]]`
(orchestration/scenario.py).

Timing: round i starts at `start + i*interval`; its faults begin at that time and are all over `duration` later.
`duration` must be shorter than `interval`, so the rounds of one schedule never overlap (several schedules, or a
schedule and hand-written faults, may: that is then the user's choice).

Replay: the schedule depends on its arguments only. Every random choice comes from one `random.Random` seeded with
a string made of the kind and the seed (never the global generator), so the same seed gives the same schedule on
every machine, and `describe()` prints it.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from typing import Any

from node.units import parse_duration

FLAPS = 4  # cuts per round of the `flapping` nemesis; each lasts duration / (2 * FLAPS), then the link is up as long

KINDS: dict[str, str] = {
    "isolate-one": "each round one random member is cut off from all the others, both ways",
    "one-way-isolate": "each round one random member stops hearing the others, or they stop hearing it (a coin flip)",
    "random-halves": "each round the members split into two random halves (sizes differ by at most one)",
    "majority-ring": "each member hears only its neighbours on a random ring: a majority, and a different one for each",
    "bridge": "two random halves that do not hear each other, and a bridge member that hears and is heard by all",
    "flapping": f"one random link is cut (both ways) and restored {FLAPS} times per round",
    "kill-restart": "one random member is killed, and restarted when the round's duration is over",
    "pause-resume": "one random member is paused (SIGSTOP), and resumed (SIGCONT) when the round's duration is over",
    "combined": "each round one of the kinds above at random (among those the number of members allows)",
}

MIN_MEMBERS: dict[str, int] = {
    "isolate-one": 2,
    "one-way-isolate": 2,
    "random-halves": 3,
    "majority-ring": 3,
    "bridge": 3,
    "flapping": 2,
    "kill-restart": 1,
    "pause-resume": 1,
    "combined": 1,
}


class NemesisError(ValueError):
    """A schedule that cannot be made. `key` is the offending field as a scenario file names it (kind, start,
    interval, for, rounds, seed, members) and `reason` the sentence without it; str() has both."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


def derive_seed(scenario_seed: int, index: int) -> int:
    """The seed of the index-th `[[nemesis]]` entry of a scenario when the entry gives none: derived from the scenario
    seed, so `--seed N` changes every nemesis, and from the index, so two entries of one kind differ."""
    digest = hashlib.sha256(f"chaosbed-nemesis/{scenario_seed}/{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def schedule(
    kind: str,
    members: Sequence[str],
    *,
    seed: int,
    start: float | str = 0.0,
    interval: float | str,
    duration: float | str,
    rounds: int = 1,
) -> list[dict[str, Any]]:
    """Raw fault tables (scenario-file format), ordered by `at` (stable). Times are seconds, or duration strings
    such as "500ms". Raises NemesisError for an unknown kind, too few members or bad numbers."""
    if not isinstance(kind, str) or kind not in KINDS:
        raise NemesisError("kind", f"unknown nemesis kind {kind!r}; kinds: {', '.join(KINDS)}")
    names = list(members) if not isinstance(members, str) else None
    if names is None or not all(isinstance(m, str) and m for m in names):
        raise NemesisError("members", "must be a list of member names")
    if len(set(names)) != len(names):
        raise NemesisError("members", "names must be distinct")
    need = MIN_MEMBERS[kind]
    if len(names) < need:
        raise NemesisError(
            "kind", f"{kind} needs at least {need} members, there {'is' if len(names) == 1 else 'are'} {len(names)}"
        )
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise NemesisError("seed", f"must be an integer, not {seed!r}")
    t0 = _seconds(start, "start")
    step = _seconds(interval, "interval")
    length = _seconds(duration, "for")
    if step <= 0:
        raise NemesisError("interval", "must be > 0")
    if length <= 0:
        raise NemesisError("for", "must be > 0")
    if length >= step:
        raise NemesisError(
            "for", f"must be shorter than interval ({length:g}s >= {step:g}s), so that the rounds do not overlap"
        )
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise NemesisError("rounds", f"must be an integer >= 1, not {rounds!r}")

    rng = random.Random(f"chaosbed-nemesis/{kind}/{seed}")
    pool = [k for k in _ROUND if MIN_MEMBERS[k] <= len(names)]
    out: list[dict[str, Any]] = []
    for i in range(rounds):
        k = rng.choice(pool) if kind == "combined" else kind
        out.extend(_ROUND[k](rng, names, t0 + i * step, length))
    out.sort(key=lambda f: parse_duration(f["at"]))
    return out


def describe(faults: Sequence[dict[str, Any]]) -> list[str]:
    """One human line per raw fault table (a schedule, or hand-written faults), e.g.
    `      2.5s  partition  A and B, C do not hear each other, for 1.5s`."""
    lines = []
    for f in faults:
        at = f.get("at", "0s")
        at = at if isinstance(at, str) else _secs(float(at))
        kind = str(f.get("kind"))
        until = f", for {f['for'] if isinstance(f['for'], str) else _secs(float(f['for']))}" if "for" in f else ""
        lines.append(f"{at:>10}  {kind:<10} {_what(f)}{until}")
    return lines


# --- one round of each kind -------------------------------------------------------------------------------------

Round = Callable[[random.Random, list[str], float, float], list[dict[str, Any]]]


def _isolate_one(rng: random.Random, members: list[str], t: float, d: float) -> list[dict[str, Any]]:
    victim = rng.choice(members)
    others = [m for m in members if m != victim]
    return [_partition(t, d, [victim], others, one_way=False)]


def _one_way_isolate(rng: random.Random, members: list[str], t: float, d: float) -> list[dict[str, Any]]:
    """A coin flip picks the direction: the victim goes deaf (from = others, to = [victim]: it hears nobody while
    everyone still hears it) or mute (from = [victim], to = others: nobody hears it while it hears everyone)."""
    victim = rng.choice(members)
    others = [m for m in members if m != victim]
    if rng.random() < 0.5:
        return [_partition(t, d, others, [victim], one_way=True)]
    return [_partition(t, d, [victim], others, one_way=True)]


def _random_halves(rng: random.Random, members: list[str], t: float, d: float) -> list[dict[str, Any]]:
    order = _shuffled(rng, members)
    half = len(order) // 2
    groups = [_ordered(order[:half], members), _ordered(order[half:], members)]
    return [{"at": _secs(t), "kind": "split", "groups": groups, "for": _secs(d)}]


def _majority_ring(rng: random.Random, members: list[str], t: float, d: float) -> list[dict[str, Any]]:
    """Jepsen's majorities ring. The members are placed on a random ring; with n members and m = n // 2 + 1, member x
    hears the m members of the arc of the ring centred on x (itself, m // 2 members before it and the rest after it:
    a strict majority counting itself). As the arcs start at different places, no two members hear the same set.
    Mapping onto partitions: one `partition` per member x, `one_way = true`, `from` = the members outside x's arc,
    `to` = [x] (x stops hearing them; the other direction is the other member's own partition)."""
    ring = _shuffled(rng, members)
    n, m = len(ring), len(ring) // 2 + 1
    out = []
    for x in members:
        i = ring.index(x)
        arc = {ring[(i + k) % n] for k in range(-(m // 2), m - m // 2)}
        out.append(_partition(t, d, [y for y in members if y not in arc], [x], one_way=True))
    return out


def _bridge(rng: random.Random, members: list[str], t: float, d: float) -> list[dict[str, Any]]:
    """A random bridge member; the others split into two random halves, partitioned from each other both ways. The
    bridge is in neither `from` nor `to`, so it hears and is heard by everyone."""
    rest = _shuffled(rng, members)[1:]  # the first of the shuffled members is the bridge
    half = len(rest) // 2
    return [_partition(t, d, _ordered(rest[:half], members), _ordered(rest[half:], members), one_way=False)]


def _flapping(rng: random.Random, members: list[str], t: float, d: float) -> list[dict[str, Any]]:
    a, b = _ordered(rng.sample(members, 2), members)
    cut = d / (2 * FLAPS)
    return [_partition(t + j * d / FLAPS, cut, [a], [b], one_way=False) for j in range(FLAPS)]


def _kill_restart(rng: random.Random, members: list[str], t: float, d: float) -> list[dict[str, Any]]:
    victim = rng.choice(members)
    return [
        {"at": _secs(t), "kind": "kill", "member": victim},
        {"at": _secs(t + d), "kind": "restart", "member": victim},
    ]


def _pause_resume(rng: random.Random, members: list[str], t: float, d: float) -> list[dict[str, Any]]:
    victim = rng.choice(members)
    return [
        {"at": _secs(t), "kind": "pause", "member": victim},
        {"at": _secs(t + d), "kind": "resume", "member": victim},
    ]


_ROUND: dict[str, Round] = {
    "isolate-one": _isolate_one,
    "one-way-isolate": _one_way_isolate,
    "random-halves": _random_halves,
    "majority-ring": _majority_ring,
    "bridge": _bridge,
    "flapping": _flapping,
    "kill-restart": _kill_restart,
    "pause-resume": _pause_resume,
}
assert set(_ROUND) | {"combined"} == set(KINDS) == set(MIN_MEMBERS)


# --- helpers ----------------------------------------------------------------------------------------------------


def _partition(t: float, d: float, src: list[str], dst: list[str], *, one_way: bool) -> dict[str, Any]:
    return {"at": _secs(t), "kind": "partition", "from": src, "to": dst, "one_way": one_way, "for": _secs(d)}


def _shuffled(rng: random.Random, members: list[str]) -> list[str]:
    order = list(members)
    rng.shuffle(order)
    return order


def _ordered(names: list[str], members: list[str]) -> list[str]:
    """names in the cluster's order (schedules read better, and stay equal whatever order the choice came in)."""
    chosen = set(names)
    return [m for m in members if m in chosen]


def _secs(x: float) -> str:
    """A time as a scenario-file duration string, to the microsecond: 2.5 -> "2.5s", 3.0 -> "3s"."""
    r = round(x, 6)
    return f"{int(r)}s" if r == int(r) else f"{r!r}s"


def _seconds(value: Any, key: str) -> float:
    return parse_duration(value, non_negative=True, error=lambda reason: NemesisError(key, reason))


def _names(value: Any) -> str:
    if value == "*":
        return "everyone"
    if isinstance(value, str):
        return value
    return ", ".join(str(v) for v in value or [])


def _what(f: dict[str, Any]) -> str:
    kind = f.get("kind")
    if kind == "partition":
        src, dst = _names(f.get("from", "*")), _names(f.get("to", "*"))
        if f.get("one_way", False):
            return f"{dst} stop{'s' if ', ' not in dst and dst != 'everyone' else ''} hearing {src}"
        return f"{src} and {dst} do not hear each other"
    if kind == "split":
        return " | ".join(_names(g) for g in f.get("groups", []))
    if kind in ("kill", "restart", "pause", "resume"):
        return str(f.get("member"))
    rest = {k: v for k, v in f.items() if k not in ("at", "kind", "for")}
    return " ".join(f"{k}={v!r}" for k, v in rest.items())
