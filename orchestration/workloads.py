"""A scenario's workloads on a cluster, per sender: started at their instant, and resumed by a member restarted after
a kill, as an application keeps sending after a crash.

Each sender's part of a workload (a `Share`: one destination of a unicast workload, or its multicasts) runs as a
workload task of the member's incarnation. A kill ends that task with the incarnation. When the scheduler restarts
the member, its new incarnation takes up what is left of each share:
- a paced share (`rate`) sends the messages due from the restart on (message i is due at start + i/rate): those
  due while the member was down are not sent, as an application that was down sends nothing;
- an unpaced share (as fast as flow control allows) sends what its earlier incarnations had not sent: the tracker
  reads the task's progress just before the kill (one `tasks` request, made only for a member with unfinished
  unpaced shares).
A restarted incarnation numbers its messages afresh ("B/2>A#1", ...), so the checker tells them apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestration.cluster import Cluster
from orchestration.scenario import Workload


@dataclass
class Share:
    """A sender's part of a workload: to one destination (None: its multicasts)."""

    workload: Workload
    sender: str
    dest: str | None
    task: int | None = None  # the task of the running incarnation (None: none runs)
    sent_before: int = 0  # messages earlier incarnations sent (unpaced shares; read just before a kill)

    def remaining(self, at: float) -> int:
        """Messages left for an incarnation that starts `at` seconds after the schedule's start."""
        w = self.workload
        if w.rate is None:
            return max(0, w.count - self.sent_before)
        due_already = math.ceil(max(0.0, at - w.start) * w.rate - 1e-9)  # messages due before `at`
        return max(0, w.count - due_already)


class WorkloadTracker:
    """The shares of a scenario's workloads on one cluster."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.shares: list[Share] = []

    def start(self, w: Workload) -> None:
        """Starts every share of the workload on its running senders."""
        running = self.cluster.running()
        for s in w.senders:
            targets: list[str | None] = [None] if w.kind == "multicast" else [d for d in w.dests if d != s]
            for dest in targets:
                share = Share(w, s, dest)
                self.shares.append(share)
                if s in running:
                    share.task = self._run(share, w.count)

    def before_kill(self, member: str) -> None:
        """Reads the progress of the member's unfinished unpaced shares (their count is what a restart resumes)."""
        unpaced = [sh for sh in self.shares if sh.sender == member and sh.task is not None and sh.workload.rate is None]
        if not unpaced or member not in self.cluster.running():
            return
        tasks = {str(k): v for k, v in self.cluster.control(member, "tasks")["tasks"].items()}  # JSON keys: strings
        for sh in unpaced:
            progress = tasks.get(str(sh.task))
            if progress is not None:
                sh.sent_before += int(progress["sent"])

    def after_kill(self, member: str) -> None:
        for sh in self.shares:
            if sh.sender == member:
                sh.task = None

    def after_restart(self, member: str, at: float) -> list[tuple[Share, int]]:
        """Starts, on the member's new incarnation, what is left of each of its shares; returns (share, count)."""
        resumed = []
        for sh in self.shares:
            if sh.sender != member or sh.task is not None:
                continue
            count = sh.remaining(at)
            if count > 0:
                sh.task = self._run(sh, count)
                resumed.append((sh, count))
        return resumed

    def _run(self, share: Share, count: int) -> int:
        w = share.workload
        if share.dest is None:
            reply = self.cluster.control(share.sender, "multicast", count=count, size=w.size, rate=w.rate)
        else:
            reply = self.cluster.control(share.sender, "send", to=share.dest, count=count, size=w.size, rate=w.rate)
        return int(reply["task"])
