"""scenarios/found/ holds the reproducers of bugs explore found in real releases (docs/explore.md): each loads from
any working directory, on its own system and, through its `[per_system.chaosbed]`, on chaosbed's member (the parity
run), and names a stack file that exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration.scenario import load

FOUND = sorted((Path(__file__).resolve().parents[2] / "scenarios" / "found").glob("*.toml"))


def test_there_are_reproducers() -> None:
    assert FOUND, "scenarios/found/ is empty"


@pytest.mark.parametrize("path", FOUND, ids=lambda p: p.stem)
def test_a_reproducer_loads_on_its_system_and_on_chaosbeds_member(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    own = load(path)
    assert own.name == path.stem
    assert own.system.name != "chaosbed" and own.faults
    if own.system.stack_files:
        assert Path(own.stack).is_absolute() and Path(own.stack).is_file(), own.stack
    parity = load(path, overrides=["cluster.system=chaosbed"])
    assert parity.system.name == "chaosbed" and parity.faults == own.faults
