"""`chaosbed down --all`: every cluster of this state root taken down, and what crashed runs left behind reaped."""

from __future__ import annotations

import shutil

from orchestration.backends import attach
from orchestration.backends.docker import reap_orphans
from orchestration.backends.netns import reap_namespaces
from orchestration.cluster import STATE_ROOT, ClusterError, list_clusters
from orchestration.host import claims, docker_engine


def reap_all() -> list[str]:
    """Takes down every cluster of this state root (STATE_ROOT) and removes orphaned labelled namespaces (no state
    file, no process), containers and networks, and a Docker engine that a killed test session started and no one
    uses. Clusters of other state roots are not touched."""
    removed = []
    for label in list_clusters():
        try:
            attach(label).down()
        except (ClusterError, KeyError, TypeError, ValueError):
            shutil.rmtree(STATE_ROOT / label, ignore_errors=True)
        removed.append(label)
    # a namespace without a state file here but with a live owner is another state root's cluster mid-start
    keep = set(list_clusters()) | claims.owned_labels()
    removed.extend(reap_namespaces(keep=keep))
    removed.extend(reap_orphans(keep=set(list_clusters()) | claims.held_labels()))  # our label only
    if docker_engine.stop_if_unused():
        removed.append("the Docker engine the tests had started")
    claims.prune()
    return removed
