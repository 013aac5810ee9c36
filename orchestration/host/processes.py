"""Signals to processes a cluster started, by pid, never by name: a pid is acted on only while its command line
still names the cluster (its label), so a recycled pid is never touched."""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int, marker: str) -> bool:
    """True if pid runs and its command line contains marker."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return marker.encode() in cmdline


def send_signal(pid: int, marker: str, sig: int) -> bool:
    """Sends sig to pid if it is still the process `marker` names; False when it is gone (or someone else's)."""
    if not alive(pid, marker):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True
