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
