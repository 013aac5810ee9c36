"""Leases on a shared resource (a Docker engine that a test session started): one file per holder, named by the
holder's pid and process start time, so a lease of a dead process, or of a process that got a reused pid, does not
count. Callers serialise taking and counting leases with their own lock."""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path

import psutil

_serial = itertools.count()


def process_started(pid: int) -> float | None:
    """The process's start time (stable for its life; with the pid, it names one process even when pids are
    reused), or None if there is no such process."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def take(folder: Path) -> Path:
    """A new lease held by this process (and thread) until `give_back`."""
    folder.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    path = folder / f"{pid}-{process_started(pid)!r}-{threading.get_ident()}-{next(_serial)}"
    path.touch()
    return path


def give_back(lease: Path) -> None:
    lease.unlink(missing_ok=True)


def live(folder: Path) -> int:
    """How many leases in folder are held by running processes; removes the others."""
    count = 0
    for lease in folder.glob("*-*-*-*") if folder.is_dir() else ():
        pid, started, _ = lease.name.split("-", 2)
        if pid.isdigit() and process_started(int(pid)) == _number(started):
            count += 1
        else:
            lease.unlink(missing_ok=True)
    return count


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
