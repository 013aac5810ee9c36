"""Rediscovering a catalogue bug (scenarios/bugs/*.toml) from scratch: explore its scenario with the flawed
property set and none of its faults, until a schedule violates exactly the bug's checks; shrink it; then replay the
minimal scenario on both variants. The bug is rediscovered when the minimal scenario fails (those checks) on the
flawed variant and passes on the fixed one: a failure that the fixed variant shares is another bug (or a schedule
no stack survives), and the search goes on past it. The shrink is differential (shrink.Judge): a step is taken
only if the smaller scenario still fails on the flawed variant and still passes on the fixed one (else shrinking
would happily remove the very properties that make the fixed variant pass, e.g. a short retransmit interval).

The variants of a minimal scenario: each key the bug's variants set (flawed and fixed, dotted --set keys) takes
its value in that variant of the bug file, or is removed where that variant of the file does not set it (the
shrinker may have removed or kept it; the minimal scenario's other keys stay as shrunk).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path

from orchestration.explore.case import load_base, run_case, scenario_of
from orchestration.explore.context import context_of
from orchestration.explore.generator import Generator
from orchestration.explore.pool import InlinePool, ProcessPool
from orchestration.explore.search import Found, SearchSpec, search
from orchestration.explore.shrink import MAX_RUNS, Judge, Shrunk, shrink
from orchestration.explore.tables import TomlTable, faults_of
from orchestration.matrix.bugs import Entry
from orchestration.scenario import apply_settings
from orchestration.toml_text import toml_value

_ABSENT = object()


@dataclass
class Rediscovery:
    entry: Entry
    tried: int  # schedules run until the bug was found (or the budget ended)
    seconds: float  # search time until then
    found: Found | None = None
    shrunk: Shrunk | None = None
    flawed: tuple[str, ...] | None = None  # what the minimal scenario violates on each variant
    fixed: tuple[str, ...] | None = None
    shared: int = 0  # failures with the bug's checks that the fixed variant shares (searched past)

    @property
    def ok(self) -> bool:
        want = tuple(sorted(self.entry.bug.violates))
        return self.shrunk is not None and self.flawed == want and self.fixed == ()

    @property
    def faults_after(self) -> int | None:
        return None if self.shrunk is None else len(faults_of(self.shrunk.raw))


def flawed_sets(entry: Entry) -> list[str]:
    """The bug's flawed property set as `--set KEY=VALUE` items."""
    return [f"{k}={toml_value(v)}" for k, v in entry.bug.flawed.items()]


def _lookup(raw: TomlTable, key: str) -> object:
    node: object = raw
    for part in key.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return _ABSENT
    return node


def _remove(raw: TomlTable, key: str) -> None:
    *parents, last = key.split(".")
    node: object = raw
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(last, None)


def variant_of(
    minimal: TomlTable, entry: Entry, variant: str, pair: tuple[str, ...] = ("flawed", "fixed")
) -> TomlTable:
    """The minimal scenario with the keys that the variants of `pair` set as `variant` of the bug file has them
    (the model's flawed/fixed pair by default; a real pair sets cluster.system and cluster.version)."""
    base = load_base(entry.path, [f"{k}={toml_value(v)}" for k, v in entry.bug.settings(variant).items()])
    out = copy.deepcopy(minimal)
    keys: dict[str, object] = {}
    for v in pair:
        keys.update(entry.bug.settings(v) if v in entry.bug.variants else {})
    for key in keys:
        if key.startswith("faults."):
            continue  # a variant's fault keys: the search drew its own faults
        value = _lookup(base, key)
        if value is _ABSENT:
            _remove(out, key)
        else:
            out = apply_settings(out, {key: value}, origin="variant")
    return out


def rediscover(
    entry: Entry,
    pool: InlinePool | ProcessPool,
    *,
    seed: int = 1,
    budget: float | None = None,
    schedules: int | None = None,
    scratch: Path,
    shrink_runs: int = MAX_RUNS,
) -> Rediscovery:
    """Searches (stopping at each failure with the bug's checks) until the bug is rediscovered or the budget ends."""
    base = load_base(entry.path, flawed_sets(entry))
    generator = Generator(context_of(scenario_of(base)))
    want = tuple(sorted(entry.bug.violates))
    judge = Judge(
        want, subject=lambda raw: variant_of(raw, entry, "flawed"), control=lambda raw: variant_of(raw, entry, "fixed")
    )
    t0, tried, start = time.monotonic(), 0, 0
    out = Rediscovery(entry, 0, 0.0)
    while True:
        left = None if budget is None else budget - (time.monotonic() - t0)
        if (left is not None and left <= 0) or (schedules is not None and start >= schedules):
            return out
        spec = SearchSpec(seed=seed, schedules=schedules, budget=left, stop_at_first=True, want=want, first=start)
        result = search(base, generator, spec, pool)
        tried += result.tried
        out.tried, out.seconds = tried, time.monotonic() - t0
        if not result.failures or result.interrupted:
            return out
        found = result.failures[0]
        start = found.index + 1
        out.found = found
        if not judge.accepts(pool.map(judge.runs(found.raw))):
            out.shared += 1  # the fixed variant fails too: another bug, or a schedule nothing survives
            continue
        out.shrunk = shrink(found.raw, judge, pool.map, batch=pool.capacity, max_runs=shrink_runs)
        flawed = run_case(variant_of(out.shrunk.raw, entry, "flawed"), scratch / "flawed")
        fixed = run_case(variant_of(out.shrunk.raw, entry, "fixed"), scratch / "fixed")
        out.flawed = flawed.violated if flawed.error is None else None
        out.fixed = fixed.violated if fixed.error is None else None
        out.tried = found.index + 1  # every schedule before it ran
        return out
