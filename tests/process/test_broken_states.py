"""Every command against a machine that changed under it: one line that says what went wrong and what to do, the exit
code its contract gives (2: could not run), never a traceback, and nothing already written lost or half-written.

Each test builds one broken state the way a user meets it (a state file an older chaosbed wrote, one cut short, a
cluster torn down or its members killed from another shell, files that are not UTF-8 or not TOML, a member that exits
at once or finds its port taken, a Docker engine that is not there, a full disk) and runs the commands that meet it
in a `chaosbed` process of their own (tests/process/broken.py). tests/netns/test_broken_states_netns.py has the
namespace that went away; tests/docker/test_broken_states_docker.py the container."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from orchestration.host.processes import alive
from tests.process.broken import Shell, fingerprints

REPO = Path(__file__).resolve().parents[2]
MEMBER_COMMANDS = (("kill", "A"), ("restart", "A"), ("pause", "A"), ("resume", "A"), ("leave", "A"))


def _up(shell: Shell, n: int = 2) -> str:
    up = shell("up", "--backend", "process", "-n", str(n), "--out", str(shell.folder / "run"))
    assert up.code == 0, up.out + up.err
    (label,) = shell.labels()
    return label


def _answers(shell: Shell, commands: list[tuple[tuple[str, ...], tuple[int, ...]]]) -> list[str]:
    problems = []
    for args, codes in commands:
        problems += shell(*args).problems(codes)
    return problems


def _wait_gone(pids: list[int], label: str, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if alive(p, label)]) and time.monotonic() < deadline:
        time.sleep(0.05)  # a deadline on a condition
    return left


def _acting_on(label: str) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    """The commands that act on a running cluster, each with --cluster and exit 2 (it could not act)."""
    commands: list[tuple[str, ...]] = [("status",), ("status", "--json"), ("fault", "list"), ("send", "A", "B")]
    commands += [(kind, member) for kind, member in MEMBER_COMMANDS]
    commands += [("fault", "partition", "--from", "A", "--to", "B")]
    return [((*c, "--cluster", label), (2,)) for c in commands]


@pytest.mark.parametrize(
    ("damage", "pids_kept"),
    [
        pytest.param(lambda state: {k: v for k, v in state.items() if k != "spec"}, True, id="older-chaosbed-no-spec"),
        pytest.param(lambda state: {**state, "members": {"A": {"name": "A"}}}, False, id="members-without-addresses"),
        pytest.param(lambda state: {**state, "format": 99}, True, id="newer-chaosbed"),
        pytest.param(lambda state: {**state, "backend": "warp"}, True, id="unknown-backend"),
        pytest.param(None, False, id="cut-short"),
    ],
)
def test_a_state_file_this_chaosbed_cannot_use(tmp_path: Path, shell: Shell, damage: object, pids_kept: bool) -> None:
    label = _up(shell)
    pids = shell.member_pids(label)
    path = shell.state_file(label)
    if callable(damage):
        path.write_text(json.dumps(damage(json.loads(path.read_text()))))
    else:
        path.write_text(path.read_text()[:40])
    problems = _answers(shell, _acting_on(label))
    down = shell("down", "--cluster", label)
    problems += down.problems((0,))
    assert not problems, "\n".join(problems)
    assert "state file" in down.out and "removed what it left" in down.out, down.out
    assert not shell.labels(), "down left the state folder"
    left = _wait_gone(pids, label)
    if pids_kept:  # the file still had the members' pids: they are gone
        assert not left, f"members {left} still run after down"
    else:  # nothing could find them: down says so, and the test stops them by the pids it read before
        assert "stop them by hand" in down.out, down.out
    for pid in left:
        os.kill(pid, signal.SIGKILL)


def test_a_cluster_torn_down_from_another_shell(tmp_path: Path, shell: Shell) -> None:
    label = _up(shell)
    assert shell("down", "--cluster", label).code == 0  # the other shell
    before = fingerprints(tmp_path / "run")
    problems = _answers(shell, [*_acting_on(label), (("down", "--cluster", label), (2,))])
    problems += _answers(shell, [(("status",), (2,)), (("send", "A", "B"), (2,)), (("down",), (2,))])
    assert not problems, "\n".join(problems)
    after = fingerprints(tmp_path / "run")
    assert {k: v for k, v in after.items() if k in before} == before, "a history or file of the run changed"


def test_members_killed_from_another_shell(tmp_path: Path, shell: Shell) -> None:
    label = _up(shell, 3)
    pids = shell.member_pids(label)
    for pid in pids[:2]:  # A and B die, C runs on
        os.kill(pid, signal.SIGKILL)
    assert not _wait_gone(pids[:2], label)
    status = shell("status", "--cluster", label)
    problems = status.problems((0,))
    assert "not running" in status.out, status.out
    commands: list[tuple[tuple[str, ...], tuple[int, ...]]] = [
        (("send", "A", "C", "--cluster", label), (2,)),
        (("send", "C", "*", "--count", "5", "--cluster", label), (0,)),
        (("kill", "B", "--cluster", label), (2,)),
        (("pause", "A", "--cluster", label), (2,)),
        (("leave", "B", "--cluster", label), (2,)),
        (("restart", "A", "--cluster", label), (0,)),
        (("down", "--cluster", label), (0,)),
    ]
    problems += _answers(shell, commands)
    assert not problems, "\n".join(problems)
    assert "is not running" in shell("send", "A", "C").err or not shell.labels()


BAD_FILES = {
    "missing": None,
    "empty": b"",
    "not-utf8": b'name = "caf\xe9"\n[cluster]\nmembers = 2\n',
    "not-toml": b"name = [unclosed\n",
    "unknown-key": b'name = "x"\n[cluster]\nmembers = 2\nstak = "unicast3"\n',
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_a_scenario_file_that_cannot_be_read(tmp_path: Path, shell: Shell, kind: str) -> None:
    path = tmp_path / "scenario.toml"
    if (content := BAD_FILES[kind]) is not None:
        path.write_bytes(content)
    matrix = tmp_path / "matrix.toml"
    matrix.write_text('name = "m"\nscenarios = ["scenario.toml"]\n[axes]\nseed = [1]\n')
    commands: list[tuple[tuple[str, ...], tuple[int, ...]]] = [
        (("run", str(path), "--backend", "sim"), (2,)),
        (("run", str(path), "--backend", "process"), (2,)),
        (("up", "--scenario", str(path), "--backend", "process"), (2,)),
        (("matrix", str(matrix), "--backend", "sim"), (2,)),
        (("explore", str(path), "--schedules", "2"), (2,)),
        (("explore", str(path), "--soak", "--backend", "process", "--budget", "30s"), (2,)),
        (("matrix", str(path)), (2,)),  # the same bytes as a matrix file
    ]
    problems = _answers(shell, commands)
    assert not problems, "\n".join(problems)
    assert not shell.labels(), "a cluster was left behind"


def test_run_folders_that_cannot_be_checked(tmp_path: Path, shell: Shell) -> None:
    garbage = tmp_path / "garbage"
    (garbage / "history").mkdir(parents=True)
    (garbage / "history" / "A.jsonl").write_bytes(b'\xff\xfe not json\n{"t": 1, "event"\n')
    (garbage / "faults.jsonl").write_bytes(b"\x00\x01")
    empty = tmp_path / "empty"
    empty.mkdir()
    before = fingerprints(garbage)
    commands: list[tuple[tuple[str, ...], tuple[int, ...]]] = [
        (("check", str(tmp_path / "nowhere"), "--spark", "local"), (2,)),
        (("check", str(empty), "--spark", "local"), (2,)),
        (("check", str(garbage), "--spark", "local"), (1, 2)),
    ]
    problems = _answers(shell, commands)
    assert not problems, "\n".join(problems)
    assert {k: v for k, v in fingerprints(garbage).items() if k in before} == before, "the histories changed"


def _foreign_scenario(path: Path, command: list[str]) -> Path:
    argv = ", ".join(json.dumps(a) for a in command)
    path.write_text(f'name = "mine"\n[cluster]\nmembers = 2\nsystem = "mine"\n[cluster.member]\ncommand = [{argv}]\n'
                    '[[workload]]\nkind = "multicast"\nfrom = "A"\ncount = 1\n')  # fmt: skip
    return path


def test_a_member_that_exits_at_once_or_finds_its_port_taken(tmp_path: Path, shell: Shell) -> None:
    dies = _foreign_scenario(tmp_path / "dies.toml", ["python3", "-c", "import sys; sys.exit('mine: no config')"])
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    code = f"import socket; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen()"
    binds = _foreign_scenario(tmp_path / "binds.toml", ["python3", "-c", code])
    try:
        commands: list[tuple[tuple[str, ...], tuple[int, ...]]] = [
            (("up", "--scenario", str(dies), "--backend", "process", "--out", str(tmp_path / "up")), (2,)),
            (("run", str(dies), "--backend", "process", "--out", str(tmp_path / "ran")), (2,)),
            (("run", str(binds), "--backend", "process", "--out", str(tmp_path / "bound")), (2,)),
            (("conform", "--", "python3", "-c", "import sys; sys.exit(4)"), (1, 2)),
        ]
        problems = _answers(shell, commands)
        bound = shell("run", str(binds), "--backend", "process", "--out", str(tmp_path / "bound2"))
    finally:
        taken.close()
    assert not problems, "\n".join(problems)
    assert "Address already in use" in bound.err, bound.err  # the member's own words reach the user
    assert not shell.labels(), "a cluster was left behind"


def test_no_docker_engine(tmp_path: Path) -> None:
    shell = Shell(tmp_path, DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock")
    scenario = str(REPO / "scenarios" / "lossy-network.toml")
    commands: list[tuple[tuple[str, ...], tuple[int, ...]]] = [
        (("run", scenario, "--backend", "docker"), (2,)),
        (("up", "--backend", "docker"), (2,)),
        (("compose", "attach"), (2,)),
        (("conform", "naive-rb", "--backend", "docker"), (2,)),
    ]
    problems = _answers(shell, commands)
    assert not problems, "\n".join(problems)


def test_commands_without_what_they_act_on(tmp_path: Path) -> None:
    """Nothing running, nothing of that name: a sentence each, never a traceback."""
    shell = Shell(tmp_path)
    commands: list[tuple[tuple[str, ...], tuple[int, ...]]] = [
        (("status",), (2,)),
        (("send", "A", "B"), (2,)),
        (("fault", "list"), (2,)),
        (("kill", "A"), (2,)),
        (("down",), (2,)),
        (("down", "--all"), (0,)),
        (("bugs", "run", "no-such-bug", "--backend", "sim"), (2,)),
        (("conform", "no-such-system"), (2,)),
        (("explore", str(REPO / "examples" / "naive_rb" / "one_way.toml"), "--schedules", "2"), (2,)),
        (("swarm", "status"), (1, 2)),
        (("spark", "status"), (0, 1)),
        (("matrix", str(tmp_path / "nowhere.toml")), (2,)),
    ]
    problems = _answers(shell, commands)
    assert not problems, "\n".join(problems)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small file system needs root")
def test_a_full_disk_keeps_what_was_written(tmp_path: Path) -> None:
    """A run folder on a disk that fills up: the run ends in one line, and a verdict.json written before stays whole."""
    shell = Shell(tmp_path)
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(disk)], check=True)
    try:
        scenario = str(REPO / "scenarios" / "lossy-network.toml")
        run = shell("run", scenario, "--backend", "sim", "--out", str(disk / "run"), "--spark", "local")
        problems = run.problems((2,))
        assert "No space left on device" in run.err + run.out, run.err + run.out
        verdict = disk / "run" / "verdict.json"
        if verdict.exists():
            json.loads(verdict.read_text())  # whole, or not there
        for path in disk.rglob("*.json"):
            json.loads(path.read_text())  # no JSON file cut short
        assert not problems, "\n".join(problems)
    finally:
        subprocess.run(["umount", str(disk)], check=True)
