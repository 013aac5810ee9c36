"""The shrinker's candidate steps: each a smaller or simpler version of a scenario, with a sentence saying what it
changes. Candidates come in a fixed order (biggest cuts first), so shrinking is deterministic:

1. fewer faults: half of them at once (when there are 4 or more), then each one (a kill or pause with the restart
   or resume that undoes it);
2. fewer workloads, fewer messages (half the count), smaller messages (size 0): early, as they make every later
   run shorter;
3. fewer members: each member leaves the scenario (dropped from workload lists and faults; a fault left with
   nobody on one side goes), while at least two remain;
4. default properties: each property the scenario (or --set) set is removed, one at a time;
5. shorter and later windows: a fault's `for` halved, or its start moved later by half of it (same end); for a
   kill/pause, its restart/resume moved halfway closer, or the kill/pause halfway later.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass

from node.units import parse_duration
from orchestration.explore.plan import secs
from orchestration.explore.tables import (
    TomlTable,
    cluster_members,
    faults_of,
    groups,
    integer,
    kind,
    opt_table,
    table,
    text,
    workloads_of,
)

UNDO = {"kill": "restart", "pause": "resume"}
MIN_WINDOW = 0.02  # seconds: windows are not shortened below this


@dataclass(frozen=True)
class Step:
    what: str
    raw: TomlTable


def candidates(raw: TomlTable) -> Iterator[Step]:
    yield from _fewer_faults(raw)
    yield from _lighter_workload(raw)  # early: every later run is shorter
    yield from _fewer_members(raw)
    yield from _default_properties(raw)
    yield from _shorter_windows(raw)


def describe(f: TomlTable) -> str:
    """A fault in a few words: `partition A -> B at 1.2s for 3s`."""
    what = f["kind"]
    who = ""
    if "groups" in f:
        who = " | ".join(",".join(g) for g in groups(f))
    elif "member" in f:
        who = text(f, "member") + (f" -> {f['peer']}" if "peer" in f else "")
    elif "from" in f or "to" in f:
        arrow = "<->" if f["kind"] == "partition" and not f.get("one_way") else "->"
        who = f"{_names(f.get('from', '*'))} {arrow} {_names(f.get('to', '*'))}"
    match = f" {f['match']}" if "match" in f else ""
    until = f" for {f['for']}" if "for" in f else ""
    return f"{what}{match} {who} at {f.get('at', '0s')}{until}".replace("  ", " ")


def _names(x: object) -> str:
    return ",".join(x) if isinstance(x, list) else str(x)


def _with(raw: TomlTable, **changes: object) -> TomlTable:
    out = copy.deepcopy(raw)
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def partner(faults: list[TomlTable], i: int) -> int | None:
    """The fault that undoes fault i (the next restart after a kill of the member, resume after a pause)."""
    f = faults[i]
    undo = UNDO.get(kind(f))
    if undo is None:
        return None
    for j in range(i + 1, len(faults)):
        if faults[j]["kind"] == undo and faults[j].get("member") == f.get("member"):
            return j
        if faults[j].get("member") == f.get("member") and faults[j]["kind"] == f["kind"]:
            return None
    return None


def _fewer_faults(raw: TomlTable) -> Iterator[Step]:
    faults = faults_of(raw)
    n = len(faults)
    if n >= 4:
        half = n // 2
        yield Step(f"removed faults 1-{half} of {n}", _with(raw, faults=faults[half:] or None))
        yield Step(f"removed faults {half + 1}-{n} of {n}", _with(raw, faults=faults[:half] or None))
    for i in reversed(range(n)):
        gone = {i}
        j = partner(faults, i)
        if j is not None:
            gone.add(j)
        rest = [f for k, f in enumerate(faults) if k not in gone]
        what = " and ".join(describe(faults[k]) for k in sorted(gone))
        yield Step(f"removed {what}", _with(raw, faults=rest or None))


def _member_names(raw: TomlTable) -> list[str]:
    m = cluster_members(raw)
    return [chr(ord("A") + i) for i in range(m)] if isinstance(m, int) else list(m)


def _drop_member(value: object, name: str) -> object:
    """A member list without `name`: "*" stays, a list loses it (None if that empties it), a name becomes None."""
    if value == "*":
        return value
    if isinstance(value, str):
        return None if value == name else value
    if isinstance(value, list):
        rest = [v for v in value if v != name]
        return rest or None
    return value


def without_member(raw: TomlTable, name: str) -> TomlTable:
    """The scenario without one member: out of `cluster.members`, workload lists and faults."""
    out = copy.deepcopy(raw)
    names = _member_names(raw)
    members = cluster_members(raw)
    table(out, "cluster")["members"] = (
        len(names) - 1 if isinstance(members, int) and name == names[-1] else [n for n in names if n != name]
    )
    workloads = []
    for w in workloads_of(out):
        keys = [k for k in ("from", "to") if k in w]
        for k in keys:
            w[k] = _drop_member(w[k], name)
        if all(w[k] is not None for k in keys):
            workloads.append(w)
    faults = []
    for f in faults_of(out):
        if name in (f.get("member"), f.get("peer")):
            continue
        keys = [k for k in ("from", "to") if k in f]
        for k in keys:
            f[k] = _drop_member(f[k], name)
        if "groups" in f:
            f["groups"] = left = [g for g in (_drop_member(g, name) for g in groups(f)) if g]
            if len(left) < 2:
                continue
        if all(f[k] is not None for k in keys):
            faults.append(f)
    for key, value in (("workload", workloads), ("faults", faults)):
        if value:
            out[key] = value
        else:
            out.pop(key, None)
    return out


def _fewer_members(raw: TomlTable) -> Iterator[Step]:
    names = _member_names(raw)
    if len(names) <= 2:
        return
    for name in reversed(names):
        yield Step(f"removed member {name}", without_member(raw, name))


def _lighter_workload(raw: TomlTable) -> Iterator[Step]:
    workloads = workloads_of(raw)
    if len(workloads) > 1:
        for i in reversed(range(len(workloads))):
            rest = [w for k, w in enumerate(workloads) if k != i]
            yield Step(f"removed workload {i + 1} ({_workload(workloads[i])})", _with(raw, workload=rest))
    for i, w in enumerate(workloads):
        count = integer(w, "count", 1)
        if count > 1:
            ws = copy.deepcopy(workloads)
            ws[i]["count"] = count // 2
            yield Step(f"workload {i + 1}: count {count} -> {count // 2}", _with(raw, workload=ws))
    for i, w in enumerate(workloads):
        size = integer(w, "size", 100)
        if size > 0:
            ws = copy.deepcopy(workloads)
            ws[i]["size"] = 0
            yield Step(f"workload {i + 1}: size {size} -> 0", _with(raw, workload=ws))


def _workload(w: TomlTable) -> str:
    to = f" -> {_names(w['to'])}" if "to" in w else ""
    return f"{w['kind']} {_names(w.get('from'))}{to} x{w.get('count', 1)}"


def _default_properties(raw: TomlTable) -> Iterator[Step]:
    props = opt_table(opt_table(raw, "cluster"), "properties")
    for proto in sorted(props):
        own = table(props, proto)
        for key in sorted(own):
            out = copy.deepcopy(raw)
            cluster = table(out, "cluster")
            props_out = table(cluster, "properties")
            del table(props_out, proto)[key]
            if not props_out[proto]:
                del props_out[proto]
            if not props_out:
                del cluster["properties"]
            yield Step(f"default {proto}.{key} (was {own[key]!r})", out)


def _shorter_windows(raw: TomlTable) -> Iterator[Step]:
    faults = faults_of(raw)
    for i, f in enumerate(faults):
        at = parse_duration(f.get("at", "0s"))
        if "for" in f:
            length = parse_duration(f["for"])
            yield from _window_steps(raw, i, None, at, length)
        j = partner(faults, i)
        if j is not None:
            yield from _window_steps(raw, i, j, at, parse_duration(faults[j]["at"]) - at)


def _window_steps(raw: TomlTable, i: int, j: int | None, at: float, length: float) -> Iterator[Step]:
    """The window of fault i (its `for`, or up to fault j that undoes it) halved from its end, or from its start."""
    half = round(length / 2, 3)
    if half < MIN_WINDOW:
        return
    for later in (False, True):
        faults = copy.deepcopy(faults_of(raw))
        start = at + half if later else at
        faults[i]["at"] = secs(start)
        if j is None:
            faults[i]["for"] = secs(length - half if later else half)
        else:
            faults[j]["at"] = secs(start + (length - half if later else half))
        what = f"{'later' if later else 'shorter'}: {describe(faults_of(raw)[i])} -> {describe(faults[i])}"
        if j is not None:
            what += f", {faults[j]['kind']} at {faults[j]['at']}"
        yield Step(what, _with(raw, faults=faults))
