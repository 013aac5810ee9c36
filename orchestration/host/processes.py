"""Signals to processes a cluster started, by pid, never by name: a pid is acted on only while it is still the
cluster's (its command line names the cluster's label, or its environment has CHAOSBED_CLUSTER=<label>, as a foreign
member's has whatever its command line), so a recycled pid is never touched."""

from __future__ import annotations

import os
from pathlib import Path

ENV_MARKER = b"CHAOSBED_CLUSTER="  # foreign members get the cluster's label in their environment (systems/launch.py)


def alive(pid: int, marker: str) -> bool:
    """True if pid runs and its command line contains marker, or its environment sets CHAOSBED_CLUSTER to it."""
    try:
        if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            return True
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return ENV_MARKER + marker.encode() in environ.split(b"\0")


def send_signal(pid: int, marker: str, sig: int, *, group: bool = False) -> bool:
    """Sends sig to pid if it is still the process `marker` names; False when it is gone (or someone else's). With
    `group`, to its whole process group when it leads one (a member started in a session of its own: a wrapper
    script's children are signalled with it)."""
    if not alive(pid, marker):
        return False
    try:
        if group and os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True
