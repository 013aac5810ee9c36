"""The same checks on every path: an in-process local session, the warm Spark service (Spark Connect) and the
plain-Python reference checker give the same verdict, violations and counters on the same histories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from analysis import spark_service
from analysis.reference import check_path
from analysis.spark import resolve
from analysis.spark_config import AUTO, CONNECT_ENV, LOCAL, is_local, requested
from analysis.synth import write_run
from tests.analysis.helpers import violation_keys

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]

# each analyze() of a folder, as JSON: verdict, violation keys, the counters of every run
SUMMARY = """
import json, sys
from analysis.pipeline import analyze
def key(v):
    return [v.check, v.sender, v.receiver, None if v.conn_id is None else str(v.conn_id), v.seqno, v.msg_id, v.detail]
out = {}
for folder in sys.argv[2:]:
    a = analyze(folder, sys.argv[1])
    out[folder] = {
        "ok": a.ok,
        "violations": {n: sorted(map(key, r.violations), key=repr) for n, r in a.results.items()},
        "counters": {n: dict(r.counters) for n, r in a.results.items()},
        "stats": {n: {k: getattr(s, k) for k in ("events", "deliveries", "violations")} for n, s in a.stats.items()},
    }
print(json.dumps(out))
"""


def summarize(target: str, folders: list[Path], cwd: Path = ROOT) -> dict:
    """analyze() of each folder on `target`, in a fresh process (a process holds one session at a time)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CHAOSBED_SPARK", *CONNECT_ENV)}
    proc = subprocess.run(
        [sys.executable, "-c", SUMMARY, target, *map(str, folders)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def histories(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Synthetic runs with each kind of fault injected, a folder of runs, and a seeded simulator run."""
    from orchestration.runner import run
    from orchestration.scenario import load

    root = tmp_path_factory.mktemp("targets")
    folders = []
    for name, inject in [
        ("clean", []),
        ("faults", ["gap", "reorder:multicast", "duplicate", "phantom:multicast", "missing"]),
        ("crash", ["crash"]),
        ("restart", ["restart"]),
        ("partition", ["partition"]),
    ]:
        write_run(root / name, members=4, rounds=30, inject=inject, seed=3)
        folders.append(root / name)
    for i, inject in enumerate([["gap"], []]):
        write_run(root / "matrix" / f"run-{i}", members=3, rounds=20, inject=inject, seed=i)
    folders.append(root / "matrix")
    sim = root / "sim"
    run(load(ROOT / "scenarios" / "partition-heal.toml", seed=7), "sim", sim)
    folders.append(sim)
    return folders


@pytest.fixture(scope="module")
def service() -> Iterator[spark_service.ServiceInfo]:
    """The Spark service of the ambient state root (the suite's shared one), under a lease while these tests use it.
    Never stopped here: another xdist worker may hold a lease on the service this module started (stopping it closed
    that worker's Spark session mid-test); the session's controller stops the service it started (the plugin)."""
    with spark_service.lease(start_if_needed=True) as info:
        assert info is not None
        yield info


def test_local_connect_and_reference_agree(histories: list[Path], service: spark_service.ServiceInfo) -> None:
    local = summarize(LOCAL, histories)
    connect = summarize(service.client_url, histories)
    first = histories[0]
    auto = summarize(AUTO, [Path(first.name)], cwd=first.parent)  # a relative folder: the server's cwd is elsewhere
    assert connect == local
    assert auto[first.name] == local[str(first)]
    for folder in histories:
        ref = check_path(folder)
        got = local[str(folder)]
        assert got["ok"] == all(not r.violations for r in ref.values()), folder
        for name, r in ref.items():
            mine = sorted((tuple(v[:6]) for v in got["violations"][name]), key=repr)
            assert mine == violation_keys(r.violations), (folder, name)
    faults = local[str(histories[1])]
    assert not faults["ok"]
    assert set(faults["stats"][histories[1].name]["violations"]) == {
        "fifo",
        "exactly_once",
        "complete",
        "no_phantoms",
    }


def test_targets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Which target a name means; local and a master URL never touch the Spark service."""
    monkeypatch.setenv("CHAOSBED_STATE", str(tmp_path))
    monkeypatch.delenv("CHAOSBED_SPARK", raising=False)
    assert requested(None) is None  # the default: the service, started on demand (test_default_target below)
    assert resolve("local") == LOCAL
    assert resolve("spark://h:7077") == "spark://h:7077"
    assert not (tmp_path / "spark").exists()
    monkeypatch.setenv("CHAOSBED_SPARK", "local")  # the opt-out of the service
    assert resolve(None) == LOCAL
    monkeypatch.setenv("CHAOSBED_SPARK", "local[2]")
    assert requested(None) == "local[2]"
    assert requested("auto") == "auto"
    assert all(is_local(t) for t in (None, "auto", "local", "local[2]", "sc://127.0.0.1:15002", "sc://localhost:1/"))
    assert not any(is_local(t) for t in ("sc://spark.example:15002", "spark://h:7077", "yarn"))


def test_the_default_falls_back_to_local_where_the_service_cannot_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No state root to keep a service in (here a file where its folder would be): the default checks in this
    process and says why on stderr; auto, asked for by name, is an error."""
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("CHAOSBED_STATE", str(tmp_path / "file"))
    monkeypatch.delenv("CHAOSBED_SPARK", raising=False)
    assert resolve(None) == LOCAL
    assert "the Spark service could not start" in capsys.readouterr().err
    with pytest.raises(OSError):
        resolve(AUTO)
