"""Foreign clusters by hand (process backend, no root): `chaosbed up --scenario` of an inline system, member faults
from the command line recorded in faults.jsonl as scheduled ones are (so `chaosbed check` knows who was killed),
status from outside; a member without control (ready on its `start` line, its own workload, the run ends when its
histories are quiet); a member that fails at start fails `up` with its own output."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from orchestration.cli.main import main
from orchestration.runner import run
from orchestration.scenario import parse
from orchestration.systems.conform import read_events

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = ["python3", str(REPO / "examples" / "naive_rb" / "member.py"), "{config}"]
SELF_DRIVEN = ["python3", str(REPO / "tests" / "foreign" / "self_driven.py"), "20", "{config}"]


def chaosbed(*args: str, ok: bool = True) -> Any:
    result = CliRunner().invoke(main, list(args))
    assert not ok or result.exit_code == 0, result.output
    return result


def scenario_file(tmp_path: Path, member: dict[str, Any], extra: str = "") -> Path:
    command = ", ".join(json.dumps(a) for a in member["command"])
    control = "" if member.get("control", True) else "\ncontrol = false"
    text = f'name = "mine"\n[cluster]\nmembers = 3\nsystem = "mine"\n[cluster.member]\ncommand = [{command}]{control}\n'
    path = tmp_path / "mine.toml"
    path.write_text(text + extra)
    return path


def label_of(output: str) -> str:
    return output.split("cluster ", 1)[1].split(" ", 1)[0]


def test_member_faults_from_the_command_line(tmp_path: Path) -> None:
    up = chaosbed("up", "--scenario", str(scenario_file(tmp_path, {"command": EXAMPLE})), "--backend", "process",
                  "--out", str(tmp_path / "run"))  # fmt: skip
    label = label_of(up.output)
    try:
        contract_config_and_token(label)
        chaosbed("send", "A", "B", "--count", "5", "--cluster", label)
        for kind, member in (("kill", "B"), ("restart", "B"), ("pause", "C"), ("resume", "C"), ("leave", "C")):
            assert f"{kind} {member}: done" in chaosbed(kind, member, "--cluster", label).output
        refused = chaosbed("restart", "A", "--cluster", label, ok=False)
        assert refused.exit_code == 2 and "restart A: member A is running; kill it first" in refused.output
        status = chaosbed("status", "--cluster", label).output
        assert "system mine" in status and "not running" in status and "not known from outside" in status
    finally:
        chaosbed("down", "--cluster", label)
    records = [json.loads(x) for x in (tmp_path / "run" / "faults.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["member"]) for r in records] == [
        ("kill", "B"), ("restart", "B"), ("pause", "C"), ("resume", "C"), ("leave", "C")
    ]  # fmt: skip
    assert all(set(r) == {"t", "event", "seed", "kind", "member"} and r["event"] == "fault" for r in records)
    assert [r["t"] for r in records] == sorted(r["t"] for r in records)
    b = read_events(tmp_path / "run" / "history" / "B.jsonl")
    assert [(e["event"], e["incarnation"]) for e in b if e["event"] in ("start", "stop")] == [("start", 1),
                                                                                              ("start", 2),
                                                                                              ("stop", 2)]  # fmt: skip
    c = read_events(tmp_path / "run" / "history" / "C.jsonl")
    assert c[-1]["event"] == "stop"  # leave: SIGTERM, then `stop` last


@pytest.mark.spark
def test_check_knows_who_was_killed_from_the_command_line(tmp_path: Path) -> None:
    from analysis.command import check

    up = chaosbed("up", "--members", "3", "--stack", "unicast3", "--backend", "process", "--out", str(tmp_path / "r"))
    label = label_of(up.output)
    try:
        chaosbed("kill", "C", "--cluster", label)
    finally:
        chaosbed("down", "--cluster", label)
    assert check(tmp_path / "r") == 0
    stats = json.loads((tmp_path / "r" / "verdict.json").read_text())["stats"]
    assert stats["members"]["C"]["alive"] is False and stats["faults"] == 1


@pytest.mark.spark
def test_a_member_without_control_runs_its_own_workload(tmp_path: Path) -> None:
    from analysis.command import check

    sc = parse(
        {
            "name": "self-driven",
            "timeout": "60s",
            "cluster": {"members": 3, "system": "mine", "member": {"command": SELF_DRIVEN, "control": False}},
            "faults": [{"at": "0.2s", "kind": "kill", "member": "C"}, {"at": "0.6s", "kind": "restart", "member": "C"}],
        }
    )
    started = time.monotonic()
    outcome = run(sc, "process", tmp_path / "run")
    assert time.monotonic() - started < 30  # ended when the histories were quiet, not at the 60 s timeout
    assert outcome.extra_violations == []
    a = read_events(tmp_path / "run" / "history" / "A.jsonl")
    assert sum(e["event"] == "send" for e in a) == 40 and a[-1]["event"] == "stop"
    # checked; its own workload starts before its peers listen, and what naive-rb then gets wrong varies
    assert check(tmp_path / "run") in (0, 1)
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert not [v for v in verdict["violations"] if v["check"] in ("history", "timeout")]


def test_a_member_that_fails_at_start_fails_up_with_its_own_output(tmp_path: Path) -> None:
    broken = {"command": ["python3", "-c", "import sys; sys.exit('mine: cannot read {config}')"]}
    up = chaosbed("up", "--scenario", str(scenario_file(tmp_path, broken)), "--backend", "process",
                  "--out", str(tmp_path / "run"), ok=False)  # fmt: skip
    assert up.exit_code == 2
    assert "member A (system 'mine') exited with 1 at start; its output ends with:" in up.output
    assert "mine: cannot read /" in up.output


def contract_config_and_token(label: str) -> None:
    """Each member's config file has the contract's keys and the token (readable by us only); the token is in the
    member's environment and never on its command line."""
    from orchestration.backends import attach

    cluster = attach(label)
    for name, m in cluster.members.items():
        config = Path(m.config)
        doc = json.loads(config.read_text())
        keys = {"name", "address", "ip", "port", "history", "incarnation", "cluster", "token", "peers", "mcast_group",
                "mcast_port", "transport", "system"}  # fmt: skip
        assert set(doc) == keys and doc["name"] == name and doc["cluster"] == label and doc["system"] == "mine"
        assert doc["peers"] == {n: [o.ip, o.port] for n, o in cluster.members.items()}
        assert doc["mcast_port"] == m.port + 10_000 and config.stat().st_mode & 0o077 == 0
        cmdline = Path(f"/proc/{m.pid}/cmdline").read_bytes()
        environ = Path(f"/proc/{m.pid}/environ").read_bytes().split(b"\0")
        assert cluster.token.encode() not in cmdline and str(config).encode() in cmdline
        assert f"CHAOSBED_TOKEN={cluster.token}".encode() in environ
        peers = ",".join(f"{n}={o.ip}:{o.port}" for n, o in cluster.members.items() if n != name)
        assert f"CHAOSBED_PEERS={peers}".encode() in environ


def test_a_control_leave_that_the_member_refuses_falls_back_to_sigterm(tmp_path: Path) -> None:
    """`leave = "control"` on a member that does not know the command (the example answers it ok: false): the
    `leave` fault then sends SIGTERM, and the member writes `stop` (no `left`) and exits as before."""
    from orchestration.systems.clusters import new_cluster, spec_of
    from orchestration.systems.definition import inline

    system = inline("naive-rb", {"command": EXAMPLE, "leave": "control"})
    assert system.leave == "control" and system.cluster_table()["member"]["leave"] == "control"  # type: ignore[index]
    cluster = new_cluster(spec_of(system, ["A", "B"], "process"), workdir=tmp_path / "run")
    try:
        cluster.start()
        pid = cluster.members["B"].pid
        cluster.leave("B")
        assert "B" not in cluster.running()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not [e for e in read_events(tmp_path / "run" / "history" / "B.jsonl")
                                                   if e.get("event") == "stop"]:  # fmt: skip
            time.sleep(0.05)
        kinds = [e.get("event") for e in read_events(tmp_path / "run" / "history" / "B.jsonl")]
        assert kinds[-1] == "stop" and "left" not in kinds, kinds
        assert pid is not None
    finally:
        cluster.down()
