"""minimal.toml: a shrunk failure as a plain scenario file that `chaosbed run` replays, with comments saying what it
violates, its seed, how it was found (the explore command) and the shrink trail (the faults before and after, each
step taken). Nothing in it depends on the machine, the time or the output folder: the same search writes the same
bytes."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

from orchestration.explore.steps import describe
from orchestration.explore.tables import TomlTable, faults_of
from orchestration.runner import scenario_toml
from orchestration.scenario import parse


@dataclasses.dataclass(frozen=True)
class Provenance:
    """How a failure was found: the command (without --out and -j, which change nothing found), the schedule's
    index and seed, what it violated, and its faults as found."""

    command: str
    index: int
    seed: int
    violated: tuple[str, ...]
    faults: tuple[TomlTable, ...]


def header(
    prov: Provenance,
    trail: list[str],
    runs: int,
    complete: bool,
    faults_after: list[TomlTable],
    backend: str = "sim",
    file_name: str = "minimal.toml",
) -> list[str]:
    """The comment lines at the top of minimal.toml (without their `# `)."""
    return [
        f"minimal scenario found by chaosbed explore: violates {', '.join(prov.violated)}",
        f"schedule seed {prov.seed} (schedule #{prov.index + 1} of: {prov.command})",
        f"faults: {len(prov.faults)} as found, {len(faults_after)} after shrinking",
        "",
        "as found:",
        *(f"  {describe(f)}" for f in prov.faults),
        "",
        f"shrink trail ({len(trail)} steps taken in {runs} runs{'' if complete else '; stopped before the end'}):",
        *(f"  {i}. {what}" for i, what in enumerate(trail, 1)),
        "",
        "after shrinking:",
        *(f"  {describe(f)}" for f in faults_after),
        "",
        f"replay: chaosbed run {file_name} --backend {backend}",
    ]


def minimal_name(base_name: str, seed: int) -> str:
    return f"{base_name}-minimal-{seed}"


def write_minimal(
    path: Path, raw: TomlTable, prov: Provenance, trail: list[str], runs: int, complete: bool, backend: str = "sim"
) -> str:
    """Writes minimal.toml (the scenario `raw`, renamed, with its header; reliable.toml likewise); returns the text."""
    doc = copy.deepcopy(raw)
    doc["name"] = minimal_name(str(raw.get("name", "scenario")), prov.seed)
    sc = dataclasses.replace(parse(copy.deepcopy(doc)), raw=doc)  # validated; written as given (parse edits checks)
    text = scenario_toml(sc, header(prov, trail, runs, complete, faults_of(doc), backend, path.name))
    path.write_text(text)
    return text
