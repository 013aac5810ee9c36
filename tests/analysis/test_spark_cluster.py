"""The checker on a real Spark standalone cluster (`chaosbed spark cluster start`: a master and 2 workers from
pyspark's own classes, on 127.0.0.1): a matrix run with `--master spark://...` gives, cell by cell, the same
verdict.json, byte for byte, as the same folder checked in local mode; the job ran on the workers' executors; and
`spark cluster stop` leaves no process of the cluster behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from analysis import spark_cluster
from analysis.synth import write_run
from tests.analysis.helpers import cache_snapshot, cut_line_at_kill

pytestmark = [pytest.mark.spark, pytest.mark.spark_cluster, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def chaosbed(
    *args: str, env: dict[str, str], timeout: float = 600, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestration.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A master and 2 workers in a state root of this module's own (its URL and the environment that names it)."""
    state = tmp_path_factory.mktemp("spark-cluster-state")
    env = {k: v for k, v in os.environ.items() if k not in ("CHAOSBED_SPARK", "SPARK_REMOTE")}
    env["CHAOSBED_STATE"] = str(state)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))  # from any folder
    started = chaosbed("spark", "cluster", "start", "--workers", "2", env=env)
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        shown = chaosbed("spark", "cluster", "status", env=env)
        assert shown.returncode == 0 and "2 alive of 2" in shown.stdout, shown.stdout
        url = next(w for line in shown.stdout.splitlines() if line.startswith("url") for w in line.split()[1:])
        yield url, env
    finally:
        stopped = chaosbed("spark", "cluster", "stop", env=env)
        left = [p.pid for p in spark_cluster.processes(state / "spark-cluster")]
        assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stdout + stopped.stderr
        assert not left, f"processes of the Spark cluster left after stop: {left}"
        assert chaosbed("spark", "cluster", "status", env=env).returncode == 1


def verdicts(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("verdict.json"))}


def test_a_matrix_checked_on_a_standalone_cluster_gives_the_local_verdicts(
    cluster: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, env = cluster
    matrix = tmp_path / "parity.toml"
    matrix.write_text(
        'name = "cluster-parity"\n'
        f'scenarios = ["{ROOT}/scenarios/one-way-split.toml", "{ROOT}/scenarios/partition-heal.toml",\n'
        f'             "{ROOT}/scenarios/crash-rejoin.toml", "{ROOT}/scenarios/bugs/unicast2-reopen.toml"]\n'
        '[axes]\nbackend = ["sim"]\n'
    )
    on_cluster = tmp_path / "on-cluster"  # named relative to the working folder: the executors' is another
    scratch = tmp_path / "tmp"  # the driver's temporary files (the code zip the executors fetch)
    scratch.mkdir()
    ran = chaosbed("matrix", str(matrix), "--out", "on-cluster", "-j", "2", "--master", url,
                   env={**env, "TMPDIR": str(scratch)}, cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 1, ran.stderr[-2000:]  # unicast2-reopen fails, as it must
    assert not list(scratch.glob("chaosbed-checks*")), "the checks' code zip outlived its session"
    local = tmp_path / "local"
    shutil.copytree(on_cluster, local, ignore=shutil.ignore_patterns(".chaosbed-cache", "verdict.json"))
    checked = chaosbed("check", str(local), "--spark", "local", env=env)
    assert checked.returncode == 1, checked.stderr[-2000:]
    cluster_verdicts, local_verdicts = verdicts(on_cluster), verdicts(local)
    assert len(cluster_verdicts) == 5, sorted(cluster_verdicts)  # four cells and the matrix's own
    assert cluster_verdicts.keys() == local_verdicts.keys()
    for cell, doc in cluster_verdicts.items():
        assert doc == local_verdicts[cell], f"{cell}: the cluster's verdict differs from local mode's"
    failed = [c for c, doc in cluster_verdicts.items() if "/" in c and not json.loads(doc)["ok"]]
    assert sorted(failed) == [c for c in sorted(cluster_verdicts) if "unicast2-reopen" in c]
    # the checks ran as applications of the cluster, on both workers' executors
    info = spark_cluster.status(Path(env["CHAOSBED_STATE"]) / "spark-cluster")
    assert info is not None
    doc = spark_cluster.master_json(info.webui_port) or {}
    apps = [a for a in doc.get("completedapps", []) if a.get("name") == "chaosbed-check"]
    assert apps and all(a.get("cores") == 2 for a in apps), doc.get("completedapps")


def test_the_cluster_ingest_writes_local_modes_cache_and_reports_bad_lines_alike(
    cluster: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    """The executors parse the history files with local mode's reader: the same summary.json (bad lines with their
    line numbers and neighbours' times, counters, views), the same part files and verdicts as `--spark local` on the
    same folder; and a damaged line stops both checks with the same message (its file and line)."""
    url, env = cluster
    runs = tmp_path / "runs"
    truths = {spec: write_run(runs / spec, members=3, rounds=30, inject=[spec]) for spec in ("truncated", "restart")}
    write_run(runs / "duplicate", members=3, rounds=30, inject=["duplicate"])
    cut_line_at_kill(runs / "restart")
    targets = (("--master", url), ("--spark", "local"))
    seen = []
    for target in targets:
        checked = chaosbed("check", str(runs), *target, env=env)
        assert checked.returncode == 1, checked.stderr[-2000:]  # the duplicate
        seen.append((cache_snapshot(runs), verdicts(runs)))
    assert seen[0] == seen[1]
    bad = {name: [(b["file"], b["line"]) for b in run["bad_lines"]] for name, run in seen[1][0][0]["runs"].items()}
    cut = f"history/{truths['truncated'].killed[0]}.jsonl"
    assert bad["truncated"] == [(cut, len((runs / "truncated" / cut).read_text().splitlines()))]
    assert [f for f, _ in bad["restart"]] == [f"history/{truths['restart'].killed[0]}.jsonl"]
    damaged = runs / "duplicate" / "history" / "B.jsonl"
    lines = damaged.read_text().splitlines()
    damaged.write_text("\n".join([*lines[:7], '{"t":5,"mem', *lines[7:]]) + "\n")
    errors = [chaosbed("check", str(runs), *target, env=env) for target in targets]
    assert [e.returncode for e in errors] == [2, 2]
    assert errors[0].stderr == errors[1].stderr and f"{damaged}:8: not a complete JSON event" in errors[0].stderr
