"""orchestration/host/engine_processes.py on a real process tree shaped as dockerd's: an "engine" whose child calls
setsid (containerd), which starts a "shim" that daemonizes (its parent becomes init, its session stays the child's)
and runs a "container" in a session of its own. Stopping the engine leaves none of them."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import psutil

from orchestration.host import engine_processes

CONTAINERD = """
import os, subprocess, sys, time
if os.fork() == 0:  # the shim: daemonizes, stays in this session
    if os.fork() > 0:
        os._exit(0)
    c = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {c.pid}")
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(120)
    os._exit(0)
time.sleep(120)
"""


def test_stopping_an_engine_stops_its_daemonized_shims_and_their_containers(tmp_path: Path) -> None:
    pids = tmp_path / "shim.pids"
    found: set[int] = set()
    engine = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {CONTAINERD!r}, "
         f"{str(pids)!r}], start_new_session=True); time.sleep(120)"],
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not pids.exists():
            assert time.monotonic() < deadline, "the shim did not start"
            time.sleep(0.05)  # polling for the shim's pid file with a deadline
        shim, container = (int(x) for x in pids.read_text().split())
        dockerd = psutil.Process(engine.pid)
        assert shim not in {p.pid for p in dockerd.children(recursive=True)}  # why children() is not enough
        found = {p.pid for p in engine_processes.family(dockerd)}
        containerd = {c.pid for c in dockerd.children()}
        assert {engine.pid, shim, container, *containerd} <= found, found
        engine_processes.stop(dockerd, timeout=5)
        engine.wait(10)
        for pid in found - {engine.pid}:
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
    finally:  # on a failure, what the test started, by pid
        for p in [
            *psutil.Process().children(recursive=True),
            *(psutil.Process(pid) for pid in found if psutil.pid_exists(pid)),
        ]:
            with contextlib.suppress(psutil.NoSuchProcess):
                if p.pid in found or p.pid == engine.pid:
                    p.kill()
        engine.wait()
