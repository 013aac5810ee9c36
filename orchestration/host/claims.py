"""Which addresses each live cluster on this machine uses, so concurrent clusters never share a subnet or a
multicast group: matrix cells run side by side, pytest-xdist workers, a user's `chaosbed up` next to a test run.

A real cluster claims one network index of a kind ("netns", "process", "veth") before it creates anything, and
releases it when it is taken down. A claim is a small JSON file in CLAIMS_DIR, which is the same for every state root
(CHAOSBED_STATE), because namespaces and loopback addresses are machine-wide. A claim is live while its owner
process runs (pid and start time, so a recycled pid does not count), or while what it describes still exists (the
cluster's state folder, or namespaces named after its label): a cluster left running by `chaosbed up` keeps its
addresses after `up` exits, and a killed orchestrator's claim lapses once `down --all` has reaped its leftovers.
Choosing and writing a claim happen under one file lock, so two processes never pick the same index.

`chaosbed down --all` also asks here which labels have a live owner, and leaves their namespaces alone even when
they have no process yet (a cluster of another state root in the middle of its start).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from orchestration.host.filelock import locked
from orchestration.host.leases import process_started, same_process

CLAIMS_DIR = Path("/run/chaosbed/.claims" if os.geteuid() == 0 else f"{tempfile.gettempdir()}/chaosbed/.claims")


class NoFreeNetwork(RuntimeError):
    """Every index of a kind is claimed by a live cluster."""


@dataclass(frozen=True)
class Claim:
    label: str
    kind: str
    index: int
    pid: int
    pid_started: float
    state_dir: str

    def owner_alive(self) -> bool:
        return same_process(self.pid, self.pid_started)

    def live(self, namespace_labels: set[str]) -> bool:
        return self.owner_alive() or Path(self.state_dir).exists() or self.label in namespace_labels


def _locked() -> contextlib.AbstractContextManager[None]:
    return locked(CLAIMS_DIR / ".lock")


def _claims() -> list[Claim]:
    found = []
    for path in CLAIMS_DIR.glob("*.json") if CLAIMS_DIR.is_dir() else ():
        try:
            found.append(Claim(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue  # being written, or damaged: a damaged claim never blocks anyone
    return found


def _namespace_labels() -> set[str]:
    netns = Path("/run/netns")
    return {p.name.split("-", 1)[0] for p in netns.iterdir()} if netns.is_dir() else set()


def claim(label: str, kind: str, space: int, state_dir: Path) -> int:
    """An index in range(space) that no live cluster of this kind holds, recorded for `label` (random among the free
    ones, so leftovers of a crash are not reused first). Raises NoFreeNetwork when all are taken."""
    with _locked():
        ns_labels = _namespace_labels()
        taken = set()
        for c in _claims():
            if c.label == label:
                continue
            if c.live(ns_labels):
                taken.add((c.kind, c.index))
            else:
                (CLAIMS_DIR / f"{c.label}.json").unlink(missing_ok=True)  # a lapsed claim
        start = secrets.randbelow(space)
        for step in range(space):
            index = (start + step) % space
            if (kind, index) not in taken:
                break
        else:
            raise NoFreeNetwork(f"all {space} {kind} networks are in use by live clusters; take some down first")
        pid = os.getpid()
        record = Claim(label, kind, index, pid, process_started(pid) or 0.0, str(state_dir))
        tmp = CLAIMS_DIR / f".{label}.tmp"
        tmp.write_text(json.dumps(asdict(record)))
        tmp.replace(CLAIMS_DIR / f"{label}.json")
        return index


def release(label: str) -> None:
    """Drops the claim of `label` (idempotent)."""
    (CLAIMS_DIR / f"{label}.json").unlink(missing_ok=True)


def prune() -> list[str]:
    """Removes the claims that have lapsed (owner gone, nothing of the cluster left); returns their labels."""
    with _locked():
        ns_labels = _namespace_labels()
        lapsed = [c.label for c in _claims() if not c.live(ns_labels)]
        for label in lapsed:
            release(label)
    return lapsed


def owned_labels(labels: Iterable[str] | None = None) -> set[str]:
    """The labels (of `labels`, or all) whose claim's owner process is alive: clusters that are starting or running
    under a live orchestrator, whatever their state root."""
    wanted = None if labels is None else set(labels)
    return {c.label for c in _claims() if (wanted is None or c.label in wanted) and c.owner_alive()}


def held_labels() -> set[str]:
    """The labels whose claim's owner is alive or whose state folder exists (in any state root): clusters that
    someone still runs. Containers of any other label are a crashed run's leftovers (orchestration/backends/docker.py
    reaps them; their attached namespaces alone do not keep them)."""
    return {c.label for c in _claims() if c.owner_alive() or Path(c.state_dir).exists()}
