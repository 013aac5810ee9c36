"""A container's network namespace named on the host (`ip netns attach NAME PID`), so that the netns fault engine and
`ip netns exec` reach a docker member as they reach a netns one.

`ip netns attach` creates /run/netns/NAME and bind-mounts /proc/PID/ns/net on it. Seen once under heavy load (CI,
~10 runnable processes on 2 cores): the bind failed for a container that had just started, and the error said nothing
about the container. A container that is still running with the same pid is attached again (bounded: ATTEMPTS); one
that stopped, or a last failure, is a ClusterError that says what the container's state was."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from orchestration.cluster import ClusterError

ATTEMPTS = 3


def attach(ns: str, container: Any) -> int:
    """Names the network namespace of `container` (a started docker SDK container) `ns` on the host; returns the
    pid of the container's first process."""
    container.reload()
    pid = int(container.attrs["State"]["Pid"])
    error = ""
    for _ in range(ATTEMPTS):
        proc = subprocess.run(["ip", "netns", "attach", ns, str(pid)], capture_output=True, text=True)
        if proc.returncode == 0:
            return pid
        error = proc.stderr.strip()
        if not _running_as(container, pid):
            break
        Path(f"/run/netns/{ns}").unlink(missing_ok=True)  # what a failed attach may leave before the next one
    raise ClusterError(f"ip netns attach {ns} {pid}: {error} ({describe(container)})")


def _running_as(container: Any, pid: int) -> bool:
    try:
        container.reload()
    except Exception:  # the engine lost it: not running
        return False
    state = container.attrs.get("State", {})
    return bool(state.get("Running")) and state.get("Pid") == pid and Path(f"/proc/{pid}/ns/net").exists()


def describe(container: Any) -> str:
    """The container's state in a few words: status, exit code, OOM kill, the engine's error."""
    try:
        container.reload()
    except Exception as e:
        return f"container {container.name}: the engine does not answer for it ({e})"
    state = container.attrs.get("State", {})
    words = [f"container {container.name} is {state.get('Status', '?')}"]
    if not state.get("Running"):
        words.append(f"exit code {state.get('ExitCode')}")
    if state.get("OOMKilled"):
        words.append("killed for memory (OOMKilled)")
    if state.get("Error"):
        words.append(f"the engine says: {state['Error']}")
    return ", ".join(words)
