"""orchestration/host/leases.py: a lease counts while its holder runs, and not when its pid now names another process
(pids are reused within minutes here) or the holder is gone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from orchestration.host import leases


def test_a_lease_counts_while_its_holder_runs(tmp_path: Path) -> None:
    lease = leases.take(tmp_path)
    assert leases.live(tmp_path) == 1
    leases.give_back(lease)
    assert leases.live(tmp_path) == 0


def test_leases_of_gone_or_other_processes_do_not_count_and_are_removed(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    (tmp_path / f"{proc.pid}-{12345.6!r}-1-0").touch()  # its holder is gone
    started = leases.process_started(os.getpid())
    assert started is not None
    (tmp_path / f"{os.getpid()}-{started - 100!r}-1-0").touch()  # our pid, another process's start time
    (tmp_path / f"{os.getpid()}-garbage-1-0").touch()
    mine = leases.take(tmp_path)
    assert leases.live(tmp_path) == 1
    assert [p.name for p in tmp_path.iterdir()] == [mine.name]


def test_a_process_start_is_read_since_boot_and_does_not_follow_the_wall_clock() -> None:
    """The start time is the kernel's clock ticks after boot: the same on every read, and the same as psutil's
    wall-clock start minus the boot time it used."""
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = leases.process_started(proc.pid)
        assert started is not None and 0 < started < 1e9
        assert leases.process_started(proc.pid) == started
        assert abs(psutil.Process(proc.pid).create_time() - psutil.boot_time() - started) < 1.0
        assert leases.same_process(proc.pid, started)
        assert not leases.same_process(proc.pid, started - 1 / leases.CLOCK_TICKS)
        # a start time that an older chaosbed wrote (wall clock): the same process, within the tolerance
        assert leases.same_process(proc.pid, psutil.Process(proc.pid).create_time())
        assert not leases.same_process(proc.pid, psutil.Process(proc.pid).create_time() - 10)
    finally:
        proc.kill()
        proc.wait()
    assert not leases.same_process(proc.pid, started)
