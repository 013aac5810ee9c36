"""`chaosbed sim`: exit codes, and the printed replay command reproduces the run byte for byte."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestration.cli.main import main

pytestmark = pytest.mark.sim


def invoke(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(main, args, catch_exceptions=False, terminal_width=400)
    return result.exit_code, result.output


def histories(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((folder / "history").iterdir())}


def test_clean_run_exits_0_and_its_replay_command_reproduces_it(tmp_path: Path) -> None:
    first = tmp_path / "first"
    code, output = invoke(
        [
            "sim",
            "--seed",
            "5",
            "--count",
            "200",
            "--loss",
            "15%",
            "--jitter",
            "3ms",
            "--discard",
            "UNICAST3.ACK()",
            "--discard-from",
            "B",
            "--discard-to",
            "A",
            "--discard-count",
            "2",
            "--out",
            str(first),
        ]
    )
    assert code == 0, output
    last = output.strip().splitlines()[-1]
    assert last.startswith("verdict: PASS; replay: chaosbed sim ")
    replay = shlex.split(last.split("replay: ", 1)[1])
    second = tmp_path / "second"
    replay[replay.index("--out") + 1] = str(second)
    code2, _ = invoke(replay[1:])
    assert code2 == 0
    assert histories(first) == histories(second)
    assert (first / "faults.jsonl").read_text() == (second / "faults.jsonl").read_text()
    assert "seed = 5" in (first / "scenario.toml").read_text()


def test_violations_exit_1(tmp_path: Path) -> None:
    # UNICAST2 has no sender-side retransmission: a lost last message is never recovered (design/UNICAST3.txt)
    code, output = invoke(
        [
            "sim",
            "--out",
            str(tmp_path / "run"),
            "--stack",
            "unicast2",
            "--members",
            "2",
            "--count",
            "50",
            "--discard",
            "UNICAST2.DATA(seqno=50)",
            "--discard-from",
            "A",
            "--discard-to",
            "B",
            "--discard-count",
            "1",
        ]
    )
    assert code == 1, output
    assert "FAIL" in output.splitlines()[-1] or "FAIL" in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--discard", "UNICAST3.AKC()"], "valid headers"),
        (["--set", "unicast3.xmit_interval=-1s"], "xmit_interval must be > 0"),
        (["--set", "unicast3.nope=1"], "unknown property 'nope'"),
        (["--discard", "UNICAST3.ACK()", "--discard-from", "Q"], "members: A, B, C"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(args: list[str], message: str) -> None:
    code, output = invoke(["sim", "--count", "1", *args])
    assert code == 2
    assert message in output
