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


WALL_CLOCK_TOLERANCE_S = 2.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_started(pid: int) -> float | None:
    """The process's start time in seconds since boot (with the pid, it names one process even when pids are reused),
    or None if there is no such process. Not the wall-clock start time psutil gives by default: that is computed
    from the boot time the kernel derives from the wall clock, which moves when the clock is set or slewed (and
    /proc/stat rounds it to a second), so two reads of one process's start can differ and a live holder look dead.
    (A leak seen once fits that: the tests' Docker engine left running with no state file and no lease; the clock's
    move itself was not caught.)"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()  # after "pid (comm) ": field 3 (state) on; comm may hold spaces
    return int(fields[19]) / CLOCK_TICKS  # field 22, starttime: clock ticks after boot (psutil has no public API)


def same_process(pid: int, started: float | None) -> bool:
    """Whether `pid` still names the process that `process_started` gave `started` for. A start time above 1e9 was
    written by a chaosbed before this one (wall clock, epoch seconds): it is compared within a tolerance."""
    if started is None:
        return False
    if started > 1e9:
        try:
            return abs(psutil.Process(pid).create_time() - started) < WALL_CLOCK_TOLERANCE_S
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False
    return process_started(pid) == started


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
        if pid.isdigit() and same_process(int(pid), _number(started)):
            count += 1
        else:
            lease.unlink(missing_ok=True)
    return count


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
