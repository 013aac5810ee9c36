"""A schedule is a scenario: the base scenario (its file with `--set` applied, its own faults left out unless
--keep-faults) with a schedule's `[[faults]]` and seed. `run_case` runs one in the simulator through the normal
runner and checks it with the plain-Python checker (analysis/reference.py), which the tests hold to the Spark
pipeline's verdicts, at a fraction of its cost per run."""

from __future__ import annotations

import copy
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestration.explore.coverage import Tail
from orchestration.explore.tables import JsonObject, TomlTable, as_int, as_number, as_strs, faults_of
from orchestration.scenario import (
    Scenario,
    ScenarioError,
    apply_overrides,
    parse,
    read_raw,
    with_named_system,
    with_stack_file,
)

if TYPE_CHECKING:
    from analysis.verdict import Violation

SEARCH_KEYS = ("faults", "nemesis", "bug")  # what the base of a search leaves out of the file (faults unless kept)
DETAILS = 5  # violations a case result keeps, as sentences


@dataclass(frozen=True)
class CaseResult:
    """What one case did: the checks it violated (sorted names; empty: it passed), or why it could not run."""

    violated: tuple[str, ...] = ()
    error: str | None = None
    events: int = 0
    seconds: float = 0.0
    details: tuple[str, ...] = field(default=(), compare=False)
    # on real members with a wire tap: what the schedule reached (coverage.py's features) and the unicast
    # (sender, receiver, message type) the wire showed
    coverage: tuple[str, ...] = field(default=(), compare=False)
    targets: tuple[tuple[str, str, str], ...] = field(default=(), compare=False)
    # a search with warm clusters (warm.py): "warm" (ran on one), "warm-confirmed" / "warm-unconfirmed: CHECKS" (a
    # warm failure rerun fresh: this is the fresh result), "warm-leaked", "warm-error: ..." (rerun fresh); "" fresh
    warm: str = field(default="", compare=False)
    # on real members: how close the run came to a bounded check's limit (pressure.py; 1.0 and above: it failed)
    pressure: float = field(default=0.0, compare=False)
    # with a wire tap: where bursts ended (coverage.py's tails: sender, receiver or "*", key, seconds, burst size)
    tails: tuple[Tail, ...] = field(default=(), compare=False)

    @property
    def failed(self) -> bool:
        return bool(self.violated) and self.error is None

    def as_json(self) -> JsonObject:
        return {
            "violated": list(self.violated),
            "error": self.error,
            "events": self.events,
            "seconds": round(self.seconds, 4),
            "details": list(self.details),
            "coverage": list(self.coverage),
            "targets": [list(t) for t in self.targets],
            "warm": self.warm,
            "pressure": round(self.pressure, 4),
            "tails": [list(t) for t in self.tails],
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> CaseResult:
        """The result as_json wrote (a worker's line): TypeError naming a field of the wrong type."""
        error = doc["error"]
        if error is not None and not isinstance(error, str):
            raise TypeError(f"error: a string or null expected, not {error!r}")
        return cls(
            tuple(as_strs(doc["violated"], "violated")),
            error,
            as_int(doc["events"], "events"),
            as_number(doc["seconds"], "seconds"),
            tuple(as_strs(doc["details"], "details")),
            tuple(as_strs(doc.get("coverage", []), "coverage")),
            tuple(_target(t) for t in doc.get("targets", []) or []),  # type: ignore[attr-defined]
            str(doc.get("warm", "")),
            as_number(doc.get("pressure", 0.0), "pressure"),
            tuple(_tail(t) for t in doc.get("tails", []) or []),  # type: ignore[attr-defined]
        )


def _target(value: object) -> tuple[str, str, str]:
    parts = as_strs(value, "targets")
    if len(parts) != 3:
        raise TypeError(f"targets: [sender, receiver, key] expected, not {value!r}")
    return parts[0], parts[1], parts[2]


def _tail(value: object) -> Tail:
    if not isinstance(value, list) or len(value) != 5:
        raise TypeError(f"tails: [sender, receiver, key, seconds, burst size] expected, not {value!r}")
    src, dst, key = as_strs(value[:3], "tails")
    return src, dst, key, as_number(value[3], "tails"), as_int(value[4], "tails")


def scenario_of(raw: TomlTable) -> Scenario:
    """The parsed scenario of a raw table, which stays as it was (parse() writes parsed values into `[checks]`)."""
    return parse(copy.deepcopy(raw))


def load_base(path: str | Path, sets: list[str] | tuple[str, ...] = (), *, keep_faults: bool = False) -> TomlTable:
    """The base scenario of a search: FILE with `--set` applied, validated; its faults, nemeses and `[bug]` table
    left out (faults and nemeses kept with keep_faults). Raises ScenarioError naming what is wrong."""
    origin = Path(path).parent  # a stack file or systems.toml beside FILE, as `chaosbed run` finds them
    raw = with_named_system(with_stack_file(apply_overrides(read_raw(path), list(sets)), origin), origin)
    scenario_of(raw)  # the file as given must be valid, faults included
    drop = ("bug",) if keep_faults else SEARCH_KEYS
    base = {k: v for k, v in raw.items() if k not in drop}
    if not keep_faults and isinstance(per := base.get("per_system"), dict):
        base["per_system"] = _without_fault_settings(per)
    return base


def _without_fault_settings(per_system: dict[str, object]) -> TomlTable:
    """`[per_system]` without its settings of the file's own faults (`"faults.0.match" = ...`): with the faults
    left out they would make a `faults` table of their own."""
    out: TomlTable = {}
    for name, settings in per_system.items():
        if isinstance(settings, dict):
            out[name] = {k: v for k, v in settings.items() if k.split(".")[0] not in SEARCH_KEYS}
        else:
            out[name] = settings
    return out


def with_faults(base: TomlTable, faults: list[TomlTable], seed: int) -> TomlTable:
    """The scenario of one schedule: the base with `faults` after its own (kept) ones, and the seed."""
    raw = {k: copy.deepcopy(v) for k, v in base.items() if k != "checks"}
    raw["seed"] = seed
    if faults:
        raw["faults"] = faults_of(raw) + copy.deepcopy(faults)
    if "checks" in base:  # last, so that a scenario file reads cluster, workload, faults, checks
        raw["checks"] = copy.deepcopy(base["checks"])
    return raw


def run_case(raw: TomlTable, out: Path, *, keep: bool = False) -> CaseResult:
    """Runs a scenario in the simulator into `out` and checks it with the reference checker. `out` is removed
    afterwards unless `keep`. A scenario that cannot run (ScenarioError) or cannot be checked is an `error`."""
    from analysis.config import InputError
    from analysis.reference import check_run
    from analysis.schema import RunFolder
    from orchestration.runner import run

    t0 = time.perf_counter()
    try:
        sc = scenario_of(raw)
        run(sc, "sim", out)
        res = check_run(RunFolder(out.name, out))
    except (ScenarioError, InputError) as e:
        return CaseResult(error=str(e), seconds=time.perf_counter() - t0)
    finally:
        if not keep:
            shutil.rmtree(out, ignore_errors=True)
    violated = tuple(sorted({v.check for v in res.violations}))
    return CaseResult(violated, None, res.events, time.perf_counter() - t0, sentences(res.violations))


def sentences(violations: Sequence[Violation]) -> tuple[str, ...]:
    """The first DETAILS violations, a line each."""
    return tuple(_sentence(v) for v in violations[:DETAILS])


def _sentence(v: Violation) -> str:
    """A violation in one line: `complete A->B seqno 7 msg A>B#7: missing`."""
    parts = [v.check]
    if v.sender and v.receiver:
        parts.append(f"{v.sender}->{v.receiver}")
    elif v.sender or v.receiver:
        parts.append(f"({v.sender or v.receiver})")
    parts += [f"{k} {x}" for k, x in (("seqno", v.seqno), ("msg", v.msg_id)) if x is not None]
    return f"{' '.join(parts)}: {v.detail}"
