"""orchestration/explore/reliable.py: the earlier forms of a flaky minimal scenario, confirmed in turn (the last step
undone, two, four, ..., then the schedule as found), the first confirmed copied to reliable.toml; explore.json's
entry says what was tried."""

from __future__ import annotations

from pathlib import Path

from orchestration.explore.confirm import ConfirmDoc, confirm_doc
from orchestration.explore.reliable import RELIABLE, distances, find_reliable, reliable_line
from orchestration.explore.tables import TomlTable, faults_of

VIOLATED = ("complete",)


def form(faults: int) -> TomlTable:
    return {"name": "f", "faults": [{"at": f"{k}s", "kind": "kill", "member": "B"} for k in range(faults)]}


def reproducing_from(least_faults: int, runs: int = 4) -> tuple[list[Path], object]:
    """A confirmation that reproduces every run of a form with at least `least_faults` faults, one run of four
    otherwise; and the files it was asked about."""
    asked: list[Path] = []

    def confirm(file: Path) -> ConfirmDoc:
        asked.append(file)
        faults = int(file.read_text())
        per_run = [list(VIOLATED) if faults >= least_faults or k == 0 else [] for k in range(runs)]
        return confirm_doc("netns", per_run, VIOLATED, [], parity=False)

    return asked, confirm


def write(file: Path, raw: TomlTable, trail: list[str]) -> None:
    file.write_text(str(len(faults_of(raw))))


def test_the_forms_tried_double_back_to_the_schedule_as_found() -> None:
    assert distances(0) == []
    assert distances(1) == [1]
    assert distances(2) == [1, 2]
    assert distances(5) == [1, 2, 4, 5]
    assert distances(20) == [1, 2, 4, 20], "at most four forms: the last is the schedule as found"


def test_the_first_earlier_form_confirmed_is_reliable_toml(tmp_path: Path) -> None:
    path = [form(6), form(5), form(4), form(3), form(2)]  # before each of five steps; the minimal one has 1 fault
    trail = [f"step {k}" for k in range(1, 6)]
    asked, confirm = reproducing_from(4)
    taken, entry = find_reliable(tmp_path, path, trail, write, confirm)  # type: ignore[arg-type]
    assert taken is not None and taken.steps_back == 4 and len(faults_of(taken.raw)) == 5
    assert [f.parent.name for f in asked] == ["reliable-back-1", "reliable-back-2", "reliable-back-4"]
    assert entry["file"] == RELIABLE and entry["steps_back"] == 4 and entry["faults"] == 5
    tried = [(t["steps_back"], t["faults"], t["reproduced"]) for t in entry["tried"]]
    assert tried == [(1, 2, 1), (2, 3, 1), (4, 5, 4)]
    assert (tmp_path / RELIABLE).read_text() == "5", "the confirmed form, copied beside minimal.toml"
    assert reliable_line(entry, 5) == "reliable.toml: 4 of 5 shrink steps undone (5 faults), reproduced 4/4"


def test_no_form_confirmed_leaves_no_reliable_toml_and_says_what_was_tried(tmp_path: Path) -> None:
    path = [form(3), form(2)]
    asked, confirm = reproducing_from(10)
    taken, entry = find_reliable(tmp_path, path, ["a", "b"], write, confirm)  # type: ignore[arg-type]
    assert taken is None and entry["file"] is None and len(asked) == 2
    assert entry["steps_back"] == 2 and entry["faults"] == 3, "the last form tried: the schedule as found"
    assert not (tmp_path / RELIABLE).exists()
    assert reliable_line(entry, 2) == (
        "no earlier form confirmed: 1 back (2 faults) 1/4, 2 back (3 faults, as found) 1/4"
    )
