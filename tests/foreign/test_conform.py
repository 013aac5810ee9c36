"""`chaosbed conform`: the example system (examples/naive_rb), chaosbed's own member and the real JGroups 2.12 jar
(jgroups-2.12, both its unicast protocols) pass every item; broken variants of the example fail exactly the items they
break, each with its reason; a system that cannot run is exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from foreign import jgroups
from orchestration.cli.main import main
from orchestration.systems import SYSTEMS
from orchestration.systems.conform import ITEMS, Checklist
from orchestration.systems.definition import inline
from tests.clusters import netns_skip_reason

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = ["python3", str(REPO / "examples" / "naive_rb" / "member.py"), "{config}"]
BROKEN = ["python3", str(REPO / "tests" / "foreign" / "broken_naive.py")]
BACKENDS = [
    pytest.param("process", id="process"),
    pytest.param(
        "netns", id="netns", marks=[pytest.mark.netns, pytest.mark.skipif(bool(netns_skip_reason()), reason="root")]
    ),
]


def checklist(command: list[str], tmp_path: Path, backend: str = "process", ready: float = 20.0) -> dict:
    items = Checklist(inline("under-test", {"command": command}), backend, tmp_path / "conform", ready=ready).run()
    assert [i.key for i in items] == list(ITEMS)
    return {i.key: i for i in items}


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_example_conforms(tmp_path: Path, backend: str) -> None:
    items = checklist(EXAMPLE, tmp_path, backend)
    assert {k: i.ok for k, i in items.items()} == {**dict.fromkeys(ITEMS, True), "leave": None}, "\n".join(
        f"{i.key}: {i.ok} {i.reason}" for i in items.values()
    )
    assert items["leave"].reason.startswith('skipped: the system has no graceful leave (leave = "sigterm"')
    assert items["unicast"].reason == "A>B#1: sent by A, delivered by B"


@pytest.mark.parametrize("system", ["chaosbed", "chaosbed-contract"])
def test_chaosbed_own_member_conforms(tmp_path: Path, system: str) -> None:
    items = Checklist(SYSTEMS[system], "process", tmp_path / "conform").run()
    assert {i.key: i.ok for i in items} == {**dict.fromkeys(ITEMS, True), "leave": None}, "\n".join(
        f"{i.key}: {i.ok} {i.reason}" for i in items
    )


@pytest.mark.jgroups
@pytest.mark.slow
@pytest.mark.skipif(jgroups.missing() is not None, reason=str(jgroups.missing()))
@pytest.mark.parametrize("backend", BACKENDS)
def test_chaosbed_conform_jgroups_passes(tmp_path: Path, backend: str) -> None:
    """The command as a user types it: `chaosbed conform jgroups-2.12` (the process backend binds the JVMs to
    127.0.0.1 with a port each), and the ack-based UNICAST variant through the API."""
    result = CliRunner().invoke(main, ["conform", "jgroups-2.12", "--backend", backend, "--out", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert "jgroups-2.12 conforms: 10 of 10 passed, 0 skipped" in result.output
    items = Checklist(SYSTEMS["jgroups-2.12-unicast"], backend, tmp_path / "b").run()
    assert {i.key: i.ok for i in items} == dict.fromkeys(ITEMS, True), "\n".join(
        f"{i.key}: {i.ok} {i.reason}" for i in items
    )


@pytest.mark.parametrize(
    ("variant", "failed", "words"),
    [
        ("no-start", {"start-first", "restart", "histories"}, "(its first must be `start`)"),
        ("wrong-clock", {"clock"}, "CLOCK_REALTIME?"),
        ("after-stop", {"sigterm", "histories"}, "not `stop`"),
        ("no-ping", {"starts"}, "broken_naive: no control endpoint in this variant"),
    ],
)
def test_a_broken_variant_fails_item_by_item(tmp_path: Path, variant: str, failed: set[str], words: str) -> None:
    items = checklist([*BROKEN, variant, "{config}"], tmp_path, ready=3.0)
    assert {k for k, i in items.items() if i.ok is False} == failed, items
    first = next(items[k] for k in ITEMS if k in failed)
    assert words in first.reason
    if variant == "no-ping":  # nothing else could run
        assert {k for k, i in items.items() if i.ok is None} == set(ITEMS) - {"starts"}
        assert "did not answer `ping`" in first.reason


def test_the_command_line(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(main, ["conform", "--out", str(tmp_path / "a"), "--", *EXAMPLE])
    assert ok.exit_code == 0, ok.output
    assert "member.py conforms: 9 of 10 passed, 1 skipped" in ok.output
    broken = runner.invoke(main, ["conform", "--out", str(tmp_path / "b"), "--", *BROKEN, "wrong-clock", "{config}"])
    assert broken.exit_code == 1 and "does not conform (1 failed)" in broken.output
    unknown = runner.invoke(main, ["conform", "my-gossip"])
    assert unknown.exit_code == 2 and "unknown system 'my-gossip'" in unknown.output
    token = runner.invoke(main, ["conform", "--", "python3", "m.py", "{token}"])
    assert token.exit_code == 2 and "never on the command line" in token.output
