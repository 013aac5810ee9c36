"""What the Docker engine we stop leaves in the host's iptables is undone (orchestration/host/docker_engine.py's
_restore_host), also a rule dockerd inserted twice: `-A FORWARD -j DOCKER-USER` was once left behind with its
chain, and the engine's next stop saw a host it had not changed. Run in a network namespace of its own, so the real
host's tables, bridges and a docker test session beside it are not touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestration.cluster import new_label
from orchestration.host import claims

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a network namespace and iptables"),
]
REPO = Path(__file__).resolve().parents[2]

# Inside the namespace: the snapshot, what dockerd adds (its chains, a rule twice, a nat rule, a bridge), the restore,
# and the snapshot again. engine_dirs are all "had": a docker session beside this test may make them meanwhile.
SCRIPT = textwrap.dedent("""
    import json, subprocess
    from orchestration.host import docker_engine as e

    def run(*argv):
        subprocess.run(argv, check=True, capture_output=True)

    before = e.host_snapshot()
    run("iptables", "-N", "DOCKER-USER")
    run("iptables", "-A", "DOCKER-USER", "-j", "RETURN")
    run("iptables", "-I", "FORWARD", "-j", "DOCKER-USER")
    run("iptables", "-I", "FORWARD", "-j", "DOCKER-USER")
    run("iptables", "-t", "nat", "-N", "DOCKER")
    run("iptables", "-t", "nat", "-A", "POSTROUTING", "-s", "172.17.0.0/16", "!", "-o", "docker0", "-j", "MASQUERADE")
    run("ip", "link", "add", "docker0", "type", "bridge")
    changed = e.host_snapshot()
    changed["jumps"] = subprocess.run(["iptables-save", "-t", "filter"], capture_output=True,
                                      text=True).stdout.count("-A FORWARD -j DOCKER-USER")
    e._restore_host({"before": {**before, "engine_dirs": list(e.ENGINE_DIRS)}})
    after = e.host_snapshot()
    print(json.dumps({"before": before, "changed": changed, "after": after}))
""")


def test_restore_removes_every_copy_of_a_rule_and_the_chains_rules_and_bridge(tmp_path: Path) -> None:
    label = new_label()
    ns = f"{label}-A"
    claims.claim(label, "netns", 100 * 250, tmp_path / "no-state-here")  # a killed test's namespace: down --all reaps
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        proc = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", SCRIPT], capture_output=True,
                              text=True, timeout=60, cwd=REPO)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        claims.release(label)
    before, changed, after = doc["before"], doc["changed"], doc["after"]
    assert changed["jumps"] == 2, changed  # the case to undo
    assert {"filter:DOCKER-USER", "nat:DOCKER"} <= set(changed["chains"]) and "docker0" in changed["links"]
    assert {k: after[k] for k in after if k != "engine_dirs"} == {k: before[k] for k in before if k != "engine_dirs"}
