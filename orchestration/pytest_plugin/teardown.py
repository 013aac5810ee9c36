"""Taking a test's cluster down, also when the test failed or was interrupted, and failing the test if anything of
the cluster is left (namespaces, processes naming its label, its state folder)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from orchestration.cluster import Cluster


def leftovers(cluster: Cluster) -> list[str]:
    """What of a taken-down cluster is still there: namespaces of its label, processes naming its label (members,
    fault handlers, timers), its state folder."""
    found = []
    if shutil.which("ip") is not None:
        from orchestration.backends.netns import list_namespaces

        spaces = [ns for ns in list_namespaces() if ns.startswith(f"{cluster.label}-")]
        if spaces:
            found.append(f"namespaces {', '.join(spaces)}")
    procs = processes_naming(cluster.label)
    if procs:
        found.append("processes " + "; ".join(f"{pid} ({cmd[:100]})" for pid, cmd in procs))
    if cluster.state_dir.exists():
        found.append(f"state {cluster.state_dir}")
    return found


def processes_naming(label: str) -> list[tuple[int, str]]:
    """(pid, command line) of every process but this one that is the cluster's: its command line contains `label`,
    or its environment sets CHAOSBED_CLUSTER to it (a foreign member, orchestration/host/processes.py)."""
    from orchestration.host.processes import alive

    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if alive(int(entry.name), label):
            found.append((int(entry.name), cmdline.replace(b"\0", b" ").decode(errors="replace").strip()))
    return found


def take_down(cluster: Cluster) -> None:
    """Takes the cluster down (a second Ctrl-C waits until that is done) and fails if anything is left."""
    from orchestration.runner import deferred_interrupts

    with deferred_interrupts():
        cluster.down()
    left = leftovers(cluster)
    if left:
        pytest.fail(f"chaosbed: cluster {cluster.label} left behind: " + "; ".join(left), pytrace=False)
