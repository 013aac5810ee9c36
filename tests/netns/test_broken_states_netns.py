"""A netns cluster whose namespace went away (deleted from another shell): every command that meets it answers in one
line with exit 2, or does what it can, never with a traceback; `down` still removes everything else
(tests/process/test_broken_states.py has the other broken states)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestration.backends.netns import list_namespaces
from tests.clusters import skip_without_chaos
from tests.process.broken import Shell

pytestmark = [pytest.mark.netns, skip_without_chaos()]


def test_a_member_namespace_deleted_from_another_shell(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    up = shell("up", "--backend", "netns", "-n", "3", "--out", str(tmp_path / "run"))
    assert up.code == 0, up.out + up.err
    (label,) = shell.labels()
    gone = f"{label}-B"
    assert gone in list_namespaces()
    subprocess.run(["ip", "netns", "del", gone], check=True)  # B's process lives on in its now nameless namespace
    c = ("--cluster", label)
    commands: list[tuple[tuple[str, ...], tuple[int, ...]]] = [
        (("status", *c), (0,)),
        (("fault", "partition", "--from", "A", "--to", "B", *c), (2,)),
        (("fault", "loss", "50%", "--from", "B", "--to", "C", *c), (2,)),
        (("fault", "list", *c), (0, 2)),
        (("send", "A", "C", "--count", "3", *c), (0,)),
        (("kill", "C", *c), (0,)),
        (("fault", "heal", *c), (0, 2)),
    ]
    problems = []
    for args, codes in commands:
        problems += shell(*args).problems(codes)
    history = tmp_path / "run" / "history"
    before = {p.name: p.read_bytes() for p in history.glob("*.jsonl")}
    down = shell("down", *c)
    problems += down.problems((0,))
    assert not problems, "\n".join(problems)
    assert not [ns for ns in list_namespaces() if ns.startswith(label)], "down left namespaces"
    assert not shell.labels(), "down left the state"
    for name, content in before.items():  # the members' stop lines may be added; nothing before them changes
        assert (history / name).read_bytes().startswith(content), f"{name} lost what it had"
