"""The processes of a Docker engine that chaosbed started, to stop it without leaving any behind.

dockerd's children are not all of them: the containerd it starts calls setsid, and each containerd-shim it starts
daemonizes (its parent becomes init) but stays in containerd's session, with the container's processes below it.
So `dockerd.children(recursive=True)` misses every shim and container (measured: a shim's ppid is 1, its sid
containerd's). The family is every process of dockerd's and its descendants' sessions, and their descendants.
"""

from __future__ import annotations

import contextlib
import os
import signal

import psutil

KILL_WAIT_S = 10.0


def _sid(p: psutil.Process) -> int | None:
    try:
        return os.getsid(p.pid)
    except OSError:
        return None


def family(dockerd: psutil.Process) -> list[psutil.Process]:
    """dockerd, containerd, the shims and the containers' processes (whatever of them still runs)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        tree = [dockerd, *dockerd.children(recursive=True)]
        sessions = {s for p in tree if (s := _sid(p)) is not None}
        found = {p.pid: p for p in tree}
        for p in psutil.process_iter():
            if p.pid not in found and _sid(p) in sessions:
                found[p.pid] = p
                with contextlib.suppress(psutil.NoSuchProcess):
                    found.update({c.pid: c for c in p.children(recursive=True)})
        return list(found.values())
    return []


def stop(dockerd: psutil.Process, timeout: float) -> None:
    """SIGTERM to dockerd (it stops its containers and containerd), then SIGKILL to whatever of its family is left
    after `timeout` seconds, and a wait for them to go."""
    members = {p.pid: p for p in family(dockerd)}
    with contextlib.suppress(psutil.NoSuchProcess):
        dockerd.send_signal(signal.SIGTERM)
    psutil.wait_procs([dockerd], timeout=timeout)
    members.update({p.pid: p for p in family(dockerd)})
    left = []
    for p in members.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.is_running():
                p.kill()
                left.append(p)
    psutil.wait_procs(left, timeout=KILL_WAIT_S)
