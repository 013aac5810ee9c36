"""Member faults on any running cluster (`chaosbed up`, or attached with `chaosbed compose attach`), from the command
line: `chaosbed kill|restart|pause|resume|leave MEMBER [--cluster L]`. Each is appended to the cluster's faults.jsonl
as a scheduled member action is (t, event, seed, kind, member; no `at`: it was not planned), so `chaosbed check` of
the cluster's folder knows who was killed, restarted or left, and when."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestration.cli.options import CommandError, attach, cluster_option, console

if TYPE_CHECKING:
    from chaos.faults import JsonObject
    from orchestration.cluster import Cluster

ACTIONS: dict[str, tuple[str, Callable[[Cluster, str], None]]] = {
    "kill": ("SIGKILL: the member stops at once, without its `stop` event", lambda c, m: c.kill(m)),
    "restart": ("start a killed (or left) member again as its next incarnation", lambda c, m: c.restart(m)),
    "pause": ("SIGSTOP (docker: the cgroup freezer): the member neither runs nor reads", lambda c, m: c.pause(m)),
    "resume": ("SIGCONT: a paused member runs again", lambda c, m: c.resume(m)),
    "leave": (
        "the member leaves: chaosbed's own runs its group's leave protocol, a foreign member gets SIGTERM",
        lambda c, m: c.leave(m),
    ),
}


def member_fault(kind: str, member: str, label: str | None) -> JsonObject:
    """Does the fault on the running cluster, keeps its state, and records it in faults.jsonl; returns the record."""
    from orchestration.cluster import ClusterError
    from orchestration.fault_log import FILE, FaultLog

    cluster = attach(label)
    if member not in cluster.members:
        raise CommandError(f"no member {member!r} in cluster {cluster.label}: {', '.join(cluster.members)}")
    t = cluster.clock.now_ns()  # when it started, as the scheduler records member actions
    try:
        ACTIONS[kind][1](cluster, member)
    except (ClusterError, OSError) as e:
        raise CommandError(f"{kind} {member}: {e}") from None
    save = getattr(cluster, "_save_state", None)
    if save is not None and cluster.state_dir.exists():
        save()  # the member's pid, pause or incarnation, for the next command
    Path(cluster.workdir).mkdir(parents=True, exist_ok=True)
    return FaultLog(Path(cluster.workdir) / FILE).action(kind, {"member": member}, t=t, seed=cluster.spec.seed)


def _command(kind: str) -> click.Command:
    def run(member: str, label: str | None) -> None:
        member_fault(kind, member, label)
        console.print(f"{kind} {member}: done (recorded in faults.jsonl)")

    run.__doc__ = f"MEMBER: {ACTIONS[kind][0]}. Recorded in the cluster's faults.jsonl."
    return click.command(name=kind)(cluster_option(click.argument("member")(run)))


kill, restart, pause, resume, leave = (_command(k) for k in ACTIONS)
