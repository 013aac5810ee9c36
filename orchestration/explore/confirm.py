"""`--confirm netns|docker`: a minimal scenario replayed N times on real members, through the runner as `chaosbed
run` does (same file, same seed), each run checked (with the reference checker, as in the search); the failure is
reproduced by a run that violates the same checks. A failure the simulator shows and real members never do is
labelled a possible parity bug: the simulator and the real stack disagree, which is itself a bug to fix.

The runs go into `confirm-<backend>-<k>/` next to minimal.toml; a backend that cannot run here (no root, no Docker)
is found out before the search starts (`check_backend`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NotRequired, TypedDict

from orchestration.scenario import ScenarioError, load

CONFIRM_BACKENDS = ("netns", "docker")
CONFIRMED = 0.75  # the least rate over fresh clusters at which a failure is called confirmed


class ReliableDoc(TypedDict):
    """`confirm.reliable`: the earlier form of a flaky minimal scenario that is confirmed (reliable.py), or what was
    tried when none was (file null)."""

    file: str | None  # reliable.toml, or None: no earlier form tried was confirmed
    steps_back: int  # shrink steps undone (the form taken, or the last one tried)
    faults: int
    tried: list[dict[str, int]]  # per form tried: {"steps_back", "faults", "runs", "reproduced"}


class ConfirmDoc(TypedDict):
    """explore.json's `confirm` entry of a failure."""

    backend: str
    runs: int
    reproduced: int  # runs that violated the same checks
    violated: list[list[str] | None]  # per run: its violated checks, or None if it could not run
    parity: bool  # no run reproduced it and every run ran: the simulator alone shows it
    errors: NotRequired[list[str]]  # the first errors of runs that could not run
    rate: NotRequired[float]  # reproduced / runs
    confirmed: NotRequired[bool]  # rate >= CONFIRMED (else: flaky, at its rate)
    parity_gap: NotRequired[bool]  # found on real members, and the simulator (chaosbed's own member) passes it
    reliable: NotRequired[ReliableDoc]  # flaky on real members: the earlier forms of its shrink confirmed in turn


def check_backend(backend: str) -> None:
    """Raises ScenarioError (naming --confirm) when the backend cannot run here."""
    from orchestration.cluster import ClusterError

    try:
        if backend == "netns":
            from orchestration.backends.netns import check_netns_available

            check_netns_available()
        elif backend == "docker":
            from orchestration.backends.netns import check_netns_available
            from orchestration.host.docker_engine import client

            check_netns_available()  # the docker backend's faults enter the containers' namespaces as root
            client(timeout=10.0)
        else:
            raise ScenarioError(f"--confirm {backend}: replays on real members: {' or '.join(CONFIRM_BACKENDS)}")
    except ClusterError as e:
        raise ScenarioError(f"--confirm {backend}: {e}") from None


def confirm(
    minimal: Path,
    violated: tuple[str, ...],
    backend: str,
    runs: int,
    on_run: Callable[[int, tuple[str, ...] | None], None] | None = None,
) -> ConfirmDoc:
    """Replays `minimal` `runs` times on `backend`; returns explore.json's `confirm` entry: {backend, runs,
    reproduced, violated: [per run: its checks, or null if it could not run], parity}."""
    from analysis.config import InputError
    from analysis.reference import check_run
    from analysis.schema import RunFolder
    from orchestration.runner import run

    per_run: list[list[str] | None] = []
    errors: list[str] = []
    for k in range(1, runs + 1):
        out = minimal.parent / f"confirm-{backend}-{k}"
        try:
            run(load(minimal), backend, out)
            got: tuple[str, ...] | None = tuple(
                sorted({v.check for v in check_run(RunFolder(out.name, out)).violations})
            )
        except (ScenarioError, InputError) as e:
            got = None
            errors.append(str(e))
        per_run.append(list(got) if got is not None else None)
        if on_run is not None:
            on_run(k, got)
    reproduced = sum(1 for v in per_run if v is not None and tuple(v) == violated)
    return confirm_doc(backend, per_run, violated, errors, parity=reproduced == 0 and not errors)


def confirm_doc(
    backend: str, per_run: list[list[str] | None], violated: tuple[str, ...], errors: list[str], *, parity: bool
) -> ConfirmDoc:
    """explore.json's `confirm` entry from each run's violated checks (None: it could not run)."""
    runs = len(per_run)
    reproduced = sum(1 for v in per_run if v is not None and tuple(v) == violated)
    rate = reproduced / runs if runs else 0.0
    doc: ConfirmDoc = {
        "backend": backend,
        "runs": runs,
        "reproduced": reproduced,
        "violated": per_run,
        "parity": parity,
        "rate": round(rate, 4),
        "confirmed": rate >= CONFIRMED,
    }
    if errors:
        doc["errors"] = errors[:3]
    return doc


def confirm_line(doc: ConfirmDoc) -> str:
    line = f"reproduced {doc['reproduced']}/{doc['runs']} on {doc['backend']}"
    if "confirmed" in doc and doc["reproduced"]:
        line += ": confirmed" if doc["confirmed"] else f": flaky ({doc.get('rate', 0.0):.0%})"
    elif "confirmed" in doc:
        line += ": not reproduced"
    if doc.get("parity_gap"):
        line += " (real members only, the simulator passes it: a parity gap to look at)"
    if doc.get("parity"):
        line += " (simulator only: a possible parity bug between the simulator and real members)"
    return line
