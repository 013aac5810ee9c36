"""`chaosbed down --all`: every cluster of this state root taken down, and what crashed runs left behind reaped."""

from __future__ import annotations

import shutil
import signal

from orchestration.backends import attach
from orchestration.backends.docker import reap_orphans, remove_containers, remove_networks
from orchestration.backends.netns import reap_namespaces
from orchestration.backends.state_file import read_raw
from orchestration.cluster import STATE_ROOT, ClusterError, list_clusters
from orchestration.host import claims, docker_engine, processes


def reap_all() -> list[str]:
    """Takes down every cluster of this state root (STATE_ROOT) and removes orphaned labelled namespaces (no state
    file, no process), containers and networks, and a Docker engine that a killed test session started and no one
    uses. Clusters of other state roots are not touched."""
    removed = []
    for label in list_clusters():
        try:
            attach(label).down()
        except ClusterError:  # a state file this chaosbed cannot use (StateFileError), an engine that went away
            reap_label(label)
        removed.append(label)
    # a namespace without a state file here but with a live owner is another state root's cluster mid-start
    keep = set(list_clusters()) | claims.owned_labels()
    removed.extend(reap_namespaces(keep=keep))
    removed.extend(reap_orphans(keep=set(list_clusters()) | claims.held_labels()))  # our label only
    if docker_engine.stop_if_unused():
        removed.append("the Docker engine the tests had started")
    claims.prune()
    return removed


def reap_label(label: str) -> list[str]:
    """What cluster `label` left when its state file cannot be used (another chaosbed version's, cut short): its
    members by the pids the file records (each only while it is still the cluster's process), its namespaces, its
    containers and networks, its claim and its state folder. Histories stay."""
    removed = []
    members = (read_raw(label) or {}).get("members")
    pids = [m.get("pid") for m in members.values() if isinstance(m, dict)] if isinstance(members, dict) else []
    for pid in pids:
        if isinstance(pid, int) and processes.send_signal(pid, label, signal.SIGKILL, group=True):
            removed.append(f"member process {pid}")
    if not any(isinstance(pid, int) for pid in pids):
        removed.append(
            f"not its member processes: the state file records none (members still running have {label} in their "
            "command line or CHAOSBED_CLUSTER in their environment: stop them by hand)"
        )
    removed.extend(f"namespace {ns}" for ns in reap_namespaces(label))
    if docker_engine.running():
        client = docker_engine.client()
        removed.extend(f"container {name}" for name in remove_containers(client, label))
        removed.extend(f"network {name}" for name in remove_networks(client, label))
    claims.release(label)
    shutil.rmtree(STATE_ROOT / label, ignore_errors=True)
    return removed
