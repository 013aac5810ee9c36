"""A user's own systems, named once: `systems.toml` files, each table a [cluster.member] table under its name.

    # systems.toml, beside your scenarios
    [my-gossip]
    command = ["python3", "gossip/member.py", "{config}"]
    wire = "none"
    stack = "gossip-v1"

A scenario that says `[cluster] system = "my-gossip"` without a [cluster.member] table gets that table from the
nearest systems.toml: the scenario file's folder, then each folder above it, then the files of $CHAOSBED_SYSTEMS
(paths separated by ':'), then ./systems.toml. The table is written into the scenario as it is read
(orchestration/scenario.py), so a run folder's scenario.toml carries the definition and replays anywhere. A
scenario's own [cluster.member] wins over a systems file; the registry's names (`chaosbed systems`) cannot be
redefined. The command runs in the working directory, as an inline one does.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from orchestration.systems import System, named
from orchestration.systems.definition import SystemProblem, inline

FILE_NAME = "systems.toml"
ENV = "CHAOSBED_SYSTEMS"
MemberTable = dict[str, object]


def search_path(origin: Path | None) -> list[Path]:
    """The systems files looked at for a scenario in folder `origin` (None: no scenario), nearest first."""
    folders = []
    if origin is not None:
        here = origin.resolve()
        folders = [here, *here.parents]
    files = [folder / FILE_NAME for folder in folders]
    files += [Path(p) for p in os.environ.get(ENV, "").split(os.pathsep) if p]
    files.append(Path.cwd() / FILE_NAME)
    return list(dict.fromkeys(files))


def definitions(origin: Path | None) -> Iterator[tuple[Path, str, MemberTable]]:
    """Every (file, name, [cluster.member] table) of the search path, nearest first; a file that cannot be read or
    is not TOML of tables is a SystemProblem naming it."""
    for path in search_path(origin):
        if not path.is_file():
            continue
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise SystemProblem(str(path), f"cannot be read as TOML: {e}") from None
        for name, table in raw.items():
            if not isinstance(table, dict):
                raise SystemProblem(f"{path}: {name}", "a system is a table: [NAME] with command = [...], ...")
            yield path, name, table


def find(name: str, origin: Path | None) -> tuple[Path, MemberTable] | None:
    """The nearest definition of system `name`, checked as a [cluster.member] table (SystemProblem naming the
    file and key if it is wrong); None when no systems file defines it."""
    for path, found, table in definitions(origin):
        if found == name:
            inline(name, table, path=f"{path}: {name}")
            return path, table
    return None


def system_named(name: str, origin: Path | None = None) -> System | None:
    """The system of this name: the registry's, else the nearest systems.toml definition (SystemProblem if it is
    wrong), else None. `origin`: the scenario's folder (None: the working directory's files and $CHAOSBED_SYSTEMS)."""
    known = named(name)
    if known is not None:
        return known
    found = find(name, origin)
    if found is None:
        return None
    path, table = found
    return replace(inline(name, table, path=f"{path}: {name}"), description=f"defined in {path}")


def user_systems(origin: Path | None = None) -> list[System]:
    """Every system the systems files define (nearest definition of each name), for `chaosbed systems`."""
    seen: dict[str, System] = {}
    for path, name, table in definitions(origin):
        if name not in seen and named(name) is None:
            seen[name] = replace(inline(name, table, path=f"{path}: {name}"), description=f"defined in {path}")
    return list(seen.values())
