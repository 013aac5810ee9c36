"""Leftovers of a killed orchestrator are reaped by `chaosbed down --all`; `up`/`down` via the CLI leave nothing (on
the process backend, and on netns as root; the netns-only cases are in tests/netns/test_cleanup.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from click.testing import CliRunner

from orchestration.backends.netns import list_namespaces
from orchestration.cli.main import main
from orchestration.cluster import STATE_ROOT
from orchestration.host.processes import alive
from tests.clusters import BACKENDS, down_all

pytestmark = pytest.mark.slow


def _orchestrator_script(backend: str, tmp: str) -> str:
    return textwrap.dedent(f"""
        import json, sys, time
        from orchestration.backends import backend_class
        from orchestration.cluster import ClusterSpec
        c = backend_class({backend!r})(ClusterSpec(members=["A", "B", "C"], backend={backend!r}), workdir={tmp!r})
        c.start()
        print(json.dumps({{"label": c.label, "pids": [m.pid for m in c.members.values()]}}), flush=True)
        time.sleep(600)
    """)


@pytest.mark.parametrize("backend", BACKENDS)
def test_down_all_reaps_the_leftovers_of_a_killed_orchestrator(backend: str, tmp_path) -> None:
    # A state root of its own, so this test never touches clusters of anyone else on the machine.
    env = {**os.environ, "CHAOSBED_STATE": str(tmp_path / "state")}
    proc = subprocess.Popen(
        [sys.executable, "-c", _orchestrator_script(backend, str(tmp_path))],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.getcwd(),
        env=env,
    )
    try:
        info = json.loads(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGKILL)  # the orchestrator dies without any teardown
        proc.wait(10)
    label, pids = info["label"], info["pids"]
    assert all(alive(p, label) for p in pids)  # its members outlive it...
    result = down_all(env)
    assert result.returncode == 0 and label in result.stdout, result.stdout + result.stderr
    deadline = time.monotonic() + 10
    while any(alive(p, label) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p, label) for p in pids)  # ...until down --all
    assert not [ns for ns in list_namespaces() if ns.startswith(label)]
    assert not (tmp_path / "state" / label).exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_cli_up_status_down(backend: str, tmp_path) -> None:
    runner = CliRunner()
    up = runner.invoke(main, ["up", "-n", "3", "--backend", backend, "--out", str(tmp_path)], catch_exceptions=False)
    assert up.exit_code == 0, up.output
    label = up.output.split("cluster ", 1)[1].split()[0]
    try:
        status = runner.invoke(main, ["status", "--cluster", label], catch_exceptions=False, terminal_width=200)
        assert status.exit_code == 0, status.output
        assert status.output.count("running") == 3
    finally:
        down = runner.invoke(main, ["down", "--cluster", label], catch_exceptions=False)
    assert down.exit_code == 0
    assert not [ns for ns in list_namespaces() if ns.startswith(label)]
    assert not (STATE_ROOT / label).exists()
    assert sorted(p.name for p in (tmp_path / "history").iterdir()) == ["A.jsonl", "B.jsonl", "C.jsonl"]


def test_ctrl_c_during_a_run_leaves_nothing_behind(tmp_path) -> None:
    """SIGINT to `chaosbed run` on a real backend in the middle of its workload: the runner's teardown removes every
    member process, namespace and state file of the run."""
    env = {**os.environ, "CHAOSBED_STATE": str(tmp_path / "state")}
    scenario = tmp_path / "long.toml"
    scenario.write_text(
        'name = "long"\ntimeout = "300s"\n[cluster]\nmembers = 3\nstack = "unicast3"\n'
        '[[workload]]\nkind = "unicast"\nfrom = "A"\nto = "B"\ncount = 1000000\nrate = 1000\n'
    )
    backend = "netns" if os.geteuid() == 0 else "process"
    # As a terminal's Ctrl-C reaches a foreground job: SIGINT raises KeyboardInterrupt in the runner even where this
    # test process inherited it ignored (a job started with `&` by a non-interactive shell, as CI may be).
    foreground = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv[0] = 'chaosbed'; runpy.run_module('orchestration', run_name='__main__')"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            foreground,
            "run",
            str(scenario),
            "--backend",
            backend,
            "--out",
            str(tmp_path / "out"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    history = tmp_path / "out" / "history" / "B.jsonl"
    while time.monotonic() < deadline and not (history.exists() and history.stat().st_size > 10_000):
        time.sleep(0.05)  # polling for the workload to be under way, with a deadline
    assert history.exists(), "the run did not start"
    state = tmp_path / "state"
    labels = [p.name for p in state.iterdir()]
    assert len(labels) == 1
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()  # SIGKILL skips the runner's teardown: down --all of this private state root does it
        proc.wait(10)
        down_all(env)
        raise AssertionError(
            f"`chaosbed run` did not stop within 60 s of SIGINT: {proc.stdout.read()[-2000:]}"
        ) from None
    label = labels[0]
    assert not (state / label).exists()
    assert not [ns for ns in list_namespaces() if ns.startswith(label)]
    leftovers = subprocess.run(["pgrep", "-f", label], capture_output=True, text=True).stdout.split()
    assert leftovers == [], f"processes of {label} left: {leftovers}"
