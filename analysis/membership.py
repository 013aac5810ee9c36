"""Who was alive, in which incarnation and in which view: derived from explicit events only (docs/architecture.md).

- Incarnations: each `restart` of a member in faults.jsonl starts a new one; an event at time t belongs to
  incarnation (number of restarts of its member at or before t). The final incarnation is the last one.
- Alive at the end: the member's history ends with a `stop` event and, in faults.jsonl order, its last kill or
  leave is followed by a restart (or it was never killed and never left). A member whose last kill/leave comes
  after its last restart has ended; `left` holds those whose end was a graceful `leave`.
- Recovery points ("heals"): the distinct ends of the fault windows (`fault_intervals`), sorted; they cut the run
  into recovery intervals for delivered_within and control_per_heal.
- Views: a member's current view at time t is the last `view` event of its incarnation at or before t.
- Addresses: a unicast send may name the incarnation it was addressed to (`dest_address`: "C", "C/2", ...);
  `addressed_incarnation` reads it the same way for both checkers.
These inputs are small (views, kills, counters), so this is plain Python shared by the Spark and the reference
checkers.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from analysis.config import CheckConfig, InputError, parse_duration
from node.addresses import parse_address
from node.fault_kinds import CUTS, NETWORK

NEVER = 1 << 62  # "no end": a fault still in force
LASTING = {*NETWORK, "link"}  # network faults (node/fault_kinds.py) and the simulator's own set_link records
BLOCKS_VIEWS = set(CUTS)  # faults that keep views apart while in force
ENDS_MEMBER = {"kill", "leave"}  # faults after which the member's incarnation is over (a restart starts another)


ViewEvent = tuple[str, int, int, str | None, list[str], bool]  # a view event: member, t, pos, view_id, members, merge


@dataclass(frozen=True)
class View:
    t: int
    pos: int
    view_id: str | None
    members: frozenset[str]
    merge: bool = False


@dataclass(frozen=True)
class Fault:
    """One fault record with its interval; `end` is NEVER while it was never healed."""

    t: int
    kind: str
    end: int
    record: dict

    @property
    def details(self) -> str:
        """The record's other keys (probability, delay, action, ...)."""
        skip = {"t", "event", "seed", "kind", "member", "peer", "from", "to", "groups", "rule", "match"}
        skip |= {"nemesis", "round"}  # a report groups faults by them
        return ", ".join(f"{k}={v}" for k, v in self.record.items() if k not in skip)

    @property
    def label(self) -> str:
        """E.g. "kill C", "split A,B | C,D", "partition A→B", "loss A,B→C"."""
        r = self.record

        def names(x: object) -> str:
            return ",".join(map(str, x)) if isinstance(x, list | tuple) else str(x)

        if r.get("rule") or r.get("match"):
            who = str(r.get("rule") or r.get("match"))
        elif r.get("member"):
            who = f"{r['member']}" + (f"→{r['peer']}" if r.get("peer") else "")
        elif r.get("groups"):
            who = " | ".join(names(g) for g in r["groups"])
        elif r.get("from") or r.get("to"):
            who = f"{names(r.get('from', '*'))}→{names(r.get('to', '*'))}"
        else:
            return self.kind
        return f"{self.kind} {who}"


@dataclass
class RunInfo:
    """Everything the checks need to know about a run besides its send and deliver events."""

    run: str
    members: list[str]
    alive: dict[str, bool]
    restarts: dict[str, list[int]]
    views: dict[str, list[View]]  # final incarnation only, in (t, pos) order
    all_views: dict[str, list[View]]
    faults: list[Fault]
    checks: CheckConfig
    t_min: int = 0
    t_max: int = 0
    has_views: bool = False
    counters: dict[str, dict[str, int]] = field(default_factory=dict)  # member -> event -> count
    left: frozenset[str] = frozenset()  # members whose final incarnation ended with a graceful leave
    t_schedule: int | None = None  # when the schedule's clock read 0 (faults.jsonl's start line), if it says

    def final_start(self, member: str) -> int:
        """The start of the member's final incarnation (a very small number when it never restarted)."""
        r = self.restarts.get(member, [])
        return r[-1] if r else -NEVER

    def inc_at(self, member: str, t: int) -> int:
        return bisect.bisect_right(self.restarts.get(member, []), t)

    def final_inc(self, member: str) -> int:
        return len(self.restarts.get(member, []))

    def heal_time(self) -> int | None:
        """When the last fault ended (views must converge within the bound after it); None without faults;
        NEVER while a partition or split is still in force at the end."""
        if not self.faults:
            return None
        return max(f.end for f in self.faults)

    def heals(self) -> list[int]:
        """The recovery points: the distinct ends of the fault windows (faults never healed have none), sorted."""
        return sorted({f.end for f in self.faults if f.end != NEVER})

    def seconds(self, t: int) -> str:
        """A time as seconds since the run's first event (as in the report), e.g. "5.000 s"."""
        return f"{(t - self.t_min) / 1e9:.3f} s"

    def interval_label(self, heals: list[int], i: int) -> str:
        """Recovery interval i (0: before the first heal; i: from heal i, 1-based, to the next one or the end)."""
        if not heals:
            return "during the run (no fault ended)"
        if i == 0:
            return f"before the first heal at {self.seconds(heals[0])}"
        start = f"between the heal at {self.seconds(heals[i - 1])}"
        return f"{start} and the end" if i == len(heals) else f"{start} and the heal at {self.seconds(heals[i])}"


def addressed_incarnation(dest: object, dest_address: object) -> int | None:
    """The incarnation number (1 = the first) a unicast send to `dest` was addressed to, from its `dest_address`;
    None when the send has none, or one that is not an address of `dest` (the time rule decides then)."""
    parsed = parse_address(dest_address)
    return parsed[1] if parsed is not None and parsed[0] == dest else None


def read_schedule_start(path: Path) -> int | None:
    """The instant the schedule's clock read 0 (docs/scenario-format.md "Fault timing": faults.jsonl's first line), or
    None when the file does not start with one."""
    try:
        with path.open(errors="replace") as f:
            first = next((line for line in f if line.strip()), "")
    except OSError:
        return None
    try:
        rec = json.loads(first)
    except json.JSONDecodeError:
        return None
    ok = isinstance(rec, dict) and rec.get("event") == "start" and isinstance(rec.get("t"), int)
    return rec["t"] if ok else None


def read_faults(path: Path) -> tuple[list[dict], int]:
    """The fault records of faults.jsonl (absent = none; its `start` line is not a fault) and the number of skipped
    (cut-off last) lines."""
    if not path.is_file():
        return [], 0
    records: list[dict] = []
    lines = path.read_text(errors="replace").splitlines()
    skipped = 0
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            rec = None
        if isinstance(rec, dict) and rec.get("event") == "start" and isinstance(rec.get("t"), int):
            continue  # the schedule's clock start (docs/scenario-format.md "Fault timing"), not a fault
        if not isinstance(rec, dict) or not isinstance(rec.get("t"), int) or "kind" not in rec:
            if i == len(lines) - 1:
                skipped += 1
                continue
            raise InputError(f"{path}:{i + 1}: not a fault record: {line[:80]!r}")
        records.append(rec)
    return records, skipped


def fault_intervals(records: list[dict]) -> list[Fault]:
    """Each fault with its end: t + `for`; else the next `heal` (network faults) or `resume` (pause); else its t."""
    faults: list[Fault] = []
    heals = sorted(((r["t"], r.get("faults")) for r in records if r.get("kind") == "heal"), key=lambda h: h[0])
    for r in records:
        kind = str(r.get("kind"))
        t = int(r["t"])
        if r.get("for") not in (None, "", 0):
            end = t + int(parse_duration(r["for"], f"fault at t={t}: for") * 1e9)
        elif kind in LASTING:
            # a heal without `faults` ends every fault; one with `faults` (ids) ends just those
            later = [h for h, ids in heals if h >= t and (ids is None or r.get("id") in ids)]
            end = later[0] if later else (NEVER if kind in BLOCKS_VIEWS else t)
        elif kind == "pause":
            later = [x["t"] for x in records if x.get("kind") == "resume" and x.get("member") == r.get("member")]
            later = [x for x in later if x >= t]
            end = min(later) if later else t
        else:
            end = t
        faults.append(Fault(t, kind, end, r))
    return sorted(faults, key=lambda f: (f.t, f.kind))


def build_run_info(
    run: str,
    member_events: dict[str, dict[str, int]],
    last_event: dict[str, str],
    views: Iterable[ViewEvent],
    fault_records: list[dict],
    checks: CheckConfig,
    t_range: tuple[int, int] = (0, 0),
    t_schedule: int | None = None,
) -> RunInfo:
    """Builds a run's membership facts from per-member event counts, last events, view events and faults."""
    members = sorted(set(member_events) | {str(r["member"]) for r in fault_records if r.get("member")})
    restarts: dict[str, list[int]] = {m: [] for m in members}
    up = dict.fromkeys(members, True)
    ended_by: dict[str, str] = {}
    for r in fault_records:  # file order decides when a kill (or leave) and a restart share a time
        m = r.get("member")
        if r.get("kind") in ENDS_MEMBER and m in up:
            up[m] = False
            ended_by[m] = str(r["kind"])
        elif r.get("kind") == "restart" and m in up:
            up[m] = True
            ended_by.pop(m, None)
            restarts[m].append(int(r["t"]))
    for m in members:
        restarts[m].sort()
    alive = {m: up[m] and last_event.get(m) == "stop" for m in members}
    all_views: dict[str, list[View]] = {m: [] for m in members}
    for member, t, pos, view_id, vmembers, merge in views:
        if member in all_views:
            all_views[member].append(View(t, pos, view_id, frozenset(vmembers or ()), bool(merge)))
    info = RunInfo(
        run=run,
        members=members,
        alive=alive,
        restarts=restarts,
        views={},
        all_views={},
        faults=fault_intervals(fault_records),
        checks=checks,
        t_min=t_range[0],
        t_max=t_range[1],
        has_views=any(all_views.values()),
        counters=member_events,
        left=frozenset(m for m, kind in ended_by.items() if kind == "leave"),
        t_schedule=t_schedule,
    )
    for m, vs in all_views.items():
        vs.sort(key=lambda v: (v.t, v.pos))
        info.all_views[m] = vs
        info.views[m] = [v for v in vs if info.inc_at(m, v.t) == info.final_inc(m)]
    return info
