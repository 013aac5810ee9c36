"""The warm Spark service's life: start, status, stop, concurrent starts, the idle timeout, leases, `down --all`,
and nothing left behind (no JVM, no Python worker, no state file). Each test has a state root of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from analysis import spark_service
from analysis.spark_service import ServiceInfo, SparkServiceError
from tests.clusters import reaper_lock

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
START = "import json; from analysis import spark_service as s; i = s.start(600); print(json.dumps([i.pid, i.port]))"


@pytest.fixture
def state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A private state root; whatever service a test leaves there is stopped."""
    monkeypatch.setenv("CHAOSBED_STATE", str(tmp_path))
    monkeypatch.delenv("CHAOSBED_SPARK", raising=False)
    yield tmp_path / "spark"
    spark_service.stop()


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def processes(info: ServiceInfo) -> list[int]:
    """The supervisor, the JVM and everything under it (Spark's Python daemons and workers, which run in process
    groups of their own)."""
    try:
        return [info.pid, *(c.pid for c in psutil.Process(info.pid).children(recursive=True))]
    except psutil.NoSuchProcess:
        return [info.pid]


def assert_gone(pids: list[int], folder: Path) -> None:
    assert wait_for(lambda: not any(spark_service._pid_alive(p) for p in pids), 30), [
        p for p in pids if spark_service._pid_alive(p)
    ]
    assert not (folder / "state.json").exists()
    assert spark_service.status() is None
    assert not list(folder.glob("scratch-*")), "the JVM's temporary files were left"


def test_concurrent_starts_share_one_server_and_down_all_stops_it(state: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen([sys.executable, "-c", START], stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)
    ]
    outs = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    assert outs[0] == outs[1]  # one server: the second caller waited for the first one's
    info = spark_service.status()
    assert info is not None and [info.pid, info.port] == outs[0]
    assert info.url == f"sc://127.0.0.1:{info.port}"
    assert spark_service._pid_alive(info.jvm_pid)
    pids = processes(info)
    assert spark_service.start().pid == info.pid  # idempotent

    from orchestration.cli.main import main

    res = CliRunner().invoke(main, ["spark", "status"])
    assert res.exit_code == 0 and info.url in res.output and str(info.pid) in res.output
    # in a process of its own: the clusters' state root is fixed at import, and this process's is the machine's
    # (an in-process `down --all` took down the clusters of the other xdist worker)
    with reaper_lock():
        res = subprocess.run(
            [sys.executable, "-m", "orchestration", "down", "--all"],
            env={**env, "CHAOSBED_STATE": str(state.parent)},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "the Spark service" in res.stdout
    assert_gone(pids, state)
    res = CliRunner().invoke(main, ["spark", "status"])
    assert res.exit_code == 1 and "not running" in res.output


def test_idle_timeout_waits_for_leases_then_stops(state: Path) -> None:
    info = spark_service.start(idle_timeout=3)
    pids = processes(info)
    scratch = state / f"scratch-{info.pid}"  # Spark's temporary files: here, not in /tmp, and removed at the stop
    assert scratch.is_dir() and f"-Djava.io.tmpdir={scratch}" in psutil.Process(info.jvm_pid).cmdline()
    with spark_service.lease() as held:  # a check in flight keeps it up past the idle timeout
        assert held == info
        time.sleep(5)  # longer than the idle timeout: what is tested is that nothing happens meanwhile
        assert spark_service.status() == info
    assert wait_for(lambda: spark_service.status() is None, 30)
    assert_gone(pids, state)


def test_stop_and_a_stale_state_file(state: Path) -> None:
    assert spark_service.stop() is False
    state.mkdir(parents=True, exist_ok=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (state / "state.json").write_text(
        json.dumps({"pid": dead.pid, "port": 1, "url": "sc://127.0.0.1:1", "started": 0, "idle_timeout": 1})
    )
    assert spark_service.status() is None
    assert not (state / "state.json").exists()


def test_start_fails_clearly_without_java(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", "/nonexistent")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SparkServiceError, match="Java 17"):
        spark_service.start()
    assert spark_service.status() is None
    assert not (state / "state.json").exists()


def test_auto_target_without_a_service_is_an_error_message_not_a_hang(state: Path) -> None:
    """An sc:// URL where nothing listens: exit 2 with a message naming the target."""
    from analysis.synth import write_run
    from orchestration.cli.main import main

    write_run(state.parent / "run", members=3, rounds=5, seed=1)
    res = CliRunner().invoke(main, ["check", str(state.parent / "run"), "--spark", "sc://127.0.0.1:1"])
    assert res.exit_code == 2


def test_a_default_check_starts_the_service_and_local_does_not(state: Path) -> None:
    """`chaosbed check RUN` without --spark (and without CHAOSBED_SPARK) checks on the Spark service, starting it
    (it stays for the next check, until its on-demand idle timeout); `--spark local` checks in its own process."""
    from analysis.synth import write_run

    run = state.parent / "run"
    write_run(run, members=3, rounds=10, inject=["gap"], seed=1)

    def check(*args: str) -> dict:
        proc = subprocess.run(
            [sys.executable, "-m", "orchestration", "check", str(run), *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 1, proc.stdout + proc.stderr
        return json.loads((run / "verdict.json").read_text())

    local = check("--spark", "local")
    assert spark_service.status() is None and not (state / "state.json").exists()
    on_service = check()
    info = spark_service.status()
    assert info is not None, "the default check did not start the Spark service"
    assert info.idle_timeout == spark_service.ON_DEMAND_IDLE_TIMEOUT
    assert info.code == spark_service.code_fingerprint()
    assert on_service["violations"] == local["violations"] and on_service["stats"] == local["stats"]
    # the service dies (its JVM killed, as an OOM killer would): the next check starts another and gives the verdict
    assert info.jvm_pid is not None
    os.kill(info.jvm_pid, 9)
    assert wait_for(lambda: not spark_service._pid_alive(info.jvm_pid or 0), 10)
    after = check()
    replaced = spark_service.status()
    assert replaced is not None and replaced.jvm_pid != info.jvm_pid
    assert after["violations"] == local["violations"]
    pids = processes(replaced)
    assert spark_service.stop() is True
    assert_gone(pids, state)
