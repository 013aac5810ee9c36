"""The wire tap of a netns cluster (chaos/wiretap.py): started in the cluster's switch namespace on the switch side
of every member's veth, stopped at the end of the schedule, its counts left in the run folder as `wire.jsonl`.

The tap is a child of this process and ends with it (it watches its parent), before the namespaces go."""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from chaos.nfqueue.client import ready_line
from chaos.wire_keys import reader_for
from orchestration.backends.netns import NetnsCluster

READY_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0


class TapError(RuntimeError):
    """The tap did not start (its reason is the message)."""


@dataclass
class WireTap:
    proc: subprocess.Popen[bytes]
    out: Path

    def stop(self) -> Path | None:
        """Ends the tap (it writes its file first); the file, or None if the tap wrote none."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # our own child
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.out if self.out.is_file() else None


def tap_possible(cluster: object, wire: str) -> bool:
    """Whether a tap can watch this cluster: a netns cluster of a system whose wire chaosbed can read."""
    return isinstance(cluster, NetnsCluster) and reader_for(wire) is not None


def start_tap(cluster: NetnsCluster, wire: str, out: Path, max_seconds: float) -> WireTap:
    """Starts the tap on the cluster's switch and waits for it to be listening."""
    names = list(cluster.members)
    cmd = ["ip", "netns", "exec", cluster.switch_ns, sys.executable, "-m", "chaos.wiretap", "--wire", wire,
           "--out", str(out), "--max-seconds", f"{max_seconds:g}"]  # fmt: skip
    for i, name in enumerate(names):
        cmd += ["--port", f"{cluster.label}{i}={name}", "--ip", f"{cluster.members[name].ip}={name}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)  # its stderr is ours: a bug shows
    tap = WireTap(proc, out)
    try:
        line = ready_line(proc, READY_TIMEOUT_S)
    except BaseException:
        tap.stop()
        raise
    if not line.get("ready"):
        tap.stop()
        why = line.get("error") or f"no ready line within {READY_TIMEOUT_S:g} s"
        raise TapError(f"the wire tap did not start: {why}")
    return tap
