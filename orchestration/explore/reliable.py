"""A reliable form of a flaky minimal scenario: when minimal.toml reproduces below the confirmation rate on real
members, earlier forms from its shrink trail are confirmed in turn. They are the forms before the last step, the one
before the last two, then four, and so on, ending with the schedule as found. The first form confirmed is written
beside minimal.toml as reliable.toml.

Why: a shrink step is kept when one of its k runs fails, so each step can lower the rate at which the failure shows.
The smallest form shows which faults matter. A form that reproduces at >= 75% is one a user can rerun and trust.
minimal.toml stays as it is, with its own rate, and explore.json's `confirm` gets a `reliable` entry."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestration.explore.confirm import ConfirmDoc, ReliableDoc
from orchestration.explore.tables import TomlTable, faults_of

RELIABLE = "reliable.toml"
MOST_FORMS = 4  # earlier forms confirmed at most (each costs a confirmation's runs)


@dataclass
class Reliable:
    raw: TomlTable
    steps_back: int


def worth_trying(confirm: ConfirmDoc, path: list[TomlTable]) -> bool:
    """Whether to look for a reliable form: the minimal scenario was confirmed with runs, was flaky, and its shrink
    took steps that can be undone."""
    return confirm["runs"] > 0 and not confirm.get("confirmed") and bool(path)


def distances(steps: int, most: int = MOST_FORMS) -> list[int]:
    """The shrink steps to undo, in the order tried: 1, 2, 4, ... then all of them (the schedule as found).

    For example, 1, 2, 4, 5 for five steps."""
    out: list[int] = []
    d = 1
    while d < steps and len(out) < most - 1:
        out.append(d)
        d *= 2
    return [*out, steps] if steps else []


def find_reliable(
    folder: Path,
    path: list[TomlTable],
    trail: list[str],
    write: Callable[[Path, TomlTable, list[str]], object],
    confirm: Callable[[Path], ConfirmDoc],
    most: int = MOST_FORMS,
) -> tuple[Reliable | None, ReliableDoc]:
    """Confirms earlier forms of a shrink in turn. path[i] is the scenario before step i of `trail`, so path[0] is
    the schedule as found. Each form is written with write(file, raw, its trail) to
    `folder/reliable-back-<n>/reliable.toml` and confirmed there with confirm(file). The first form confirmed is
    copied to `folder/reliable.toml`. Returns that form (None if none was confirmed) and explore.json's entry."""
    tried: list[dict[str, int]] = []
    taken: Reliable | None = None
    for back in distances(len(path), most):
        raw = path[len(path) - back]
        form = folder / f"reliable-back-{back}" / RELIABLE
        form.parent.mkdir(parents=True, exist_ok=True)
        write(form, raw, trail[: len(trail) - back])
        doc = confirm(form)
        faults = len(faults_of(raw))
        tried.append({"steps_back": back, "faults": faults, "runs": doc["runs"], "reproduced": doc["reproduced"]})
        if doc.get("confirmed"):
            shutil.copyfile(form, folder / RELIABLE)
            taken = Reliable(raw, back)
            break
    last = tried[-1] if tried else {"steps_back": 0, "faults": 0}
    entry: ReliableDoc = {
        "file": RELIABLE if taken else None,
        "steps_back": last["steps_back"],
        "faults": last["faults"],
        "tried": tried,
    }
    return taken, entry


def reliable_line(entry: ReliableDoc, steps: int) -> str:
    """What the output says, e.g. `reliable.toml: 1 of 4 shrink steps undone (2 faults), reproduced 9/10`."""
    last = entry["tried"][-1] if entry["tried"] else None
    if last is None:
        return "no earlier form to try"
    if entry["file"] is None:
        forms = ", ".join(
            f"{t['steps_back']} back ({t['faults']} faults{', as found' if t['steps_back'] == steps else ''}) "
            f"{t['reproduced']}/{t['runs']}"
            for t in entry["tried"]
        )
        return f"no earlier form confirmed: {forms}"
    return (
        f"{entry['file']}: {entry['steps_back']} of {steps} shrink steps undone ({entry['faults']} faults), "
        f"reproduced {last['reproduced']}/{last['runs']}"
    )
