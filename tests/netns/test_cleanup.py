"""`chaosbed down --all` on what only network namespaces leave: NFQUEUE handlers of a killed orchestrator that keep
its namespaces alive, and another state root's cluster that is starting (tests/process/test_cleanup.py has the cases
that run without root)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from orchestration.backends.netns import list_namespaces
from orchestration.host.processes import alive
from tests.clusters import down_all

pytestmark = pytest.mark.slow


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces and NFQUEUE")
@pytest.mark.parametrize("lose_state", [False, True], ids=["state-kept", "state-lost"])
def test_down_all_reaps_chaos_handlers_of_a_killed_orchestrator(tmp_path, lose_state: bool) -> None:
    """An orchestrator killed with faults in force leaves NFQUEUE handlers in its members' namespaces (they keep the
    namespaces alive). `down --all` stops them: through the cluster's state, or, when the state is gone too, by
    finding the labelled handlers in the orphaned namespaces."""
    env = {**os.environ, "CHAOSBED_STATE": str(tmp_path / "state")}
    script = textwrap.dedent(f"""
        import json, time
        from orchestration.backends import backend_class
        from orchestration.cluster import ClusterSpec
        c = backend_class("netns")(ClusterSpec(members=["A", "B"], backend="netns"), workdir={str(tmp_path)!r})
        c.start()
        c.chaos.add("delay", {{"from": ["A"], "to": ["B"], "delay": 0.01}})
        c.chaos.add("partition", {{"from": ["B"], "to": ["A"], "one_way": True}})
        handlers = [h["pid"] for h in c.chaos.handlers().values()]
        print(json.dumps({{"label": c.label, "handlers": handlers}}), flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        info = json.loads(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    label, handlers = info["label"], info["handlers"]
    assert handlers and all(alive(p, label) for p in handlers)
    if lose_state:
        import shutil

        shutil.rmtree(tmp_path / "state" / label)  # nothing says what the cluster had: only the labels remain
        for ns in (f"{label}-A", f"{label}-B"):  # and its members are gone (a crashed machine's leftovers)
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in map(int, pids):
                if alive(pid, label) and pid not in handlers:
                    os.kill(pid, signal.SIGKILL)
    result = down_all(env)
    assert result.returncode == 0, result.stdout + result.stderr
    deadline = time.monotonic() + 10
    while any(alive(p, label) for p in handlers) and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the handlers' exit, with a deadline
    assert not any(alive(p, label) for p in handlers), "NFQUEUE handlers left running"
    assert not [ns for ns in list_namespaces() if ns.startswith(label)]


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")
def test_down_all_of_another_state_root_leaves_a_cluster_that_is_starting_alone(tmp_path) -> None:
    """Under pytest-xdist one worker's `down --all` (its own state root) runs while another worker's cluster has its
    namespaces but no process yet: the live owner's claim keeps them; once the owner is gone they are orphans."""
    from orchestration.cluster import new_label
    from orchestration.host import claims

    label = new_label()
    ns = f"{label}-A"
    claims.claim(label, "netns", 100 * 250, tmp_path / "no-state-here")  # owned by this live process
    env = {**os.environ, "CHAOSBED_STATE": str(tmp_path / "state")}

    def reap() -> str:
        done = down_all(env)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    try:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        reap()
        assert ns in list_namespaces()
        claims.release(label)
        assert ns in reap()
        assert ns not in list_namespaces()
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        claims.release(label)
