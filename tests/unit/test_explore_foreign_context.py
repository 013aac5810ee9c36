"""What a search on real members draws for a foreign system (orchestration/explore/foreign_context.py): discards in
the system's own wire profile (never chaosbed's STACKS), none over tcp or without a profile, every other network fault
over tcp, no close-connection; and every schedule drawn is a scenario the system accepts (no load-time refusal)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.profiles import parse_match
from orchestration.explore.case import load_base, scenario_of, with_faults
from orchestration.explore.foreign_context import context_for, wire_headers
from orchestration.explore.generator import Generator
from orchestration.explore.search import schedule_rng, schedule_seed
from orchestration.explore.tables import TomlTable

REPO = Path(__file__).resolve().parents[2]
JG212 = REPO / "scenarios" / "bugs" / "jgroups-unicast2-last-message.toml"
NAIVE = REPO / "examples" / "naive_rb" / "one_way.toml"
OWN = REPO / "scenarios" / "bugs" / "unicast2-last-message.toml"


def draws(base: TomlTable, n: int = 150) -> list[list[TomlTable]]:
    gen = Generator(context_for(scenario_of(base), real=True))
    out = []
    for i in range(n):
        seed = schedule_seed(5, i)
        faults = gen.draw(schedule_rng(seed))
        scenario_of(with_faults(base, faults, seed))  # a refused fault would raise ScenarioError here
        out.append(faults)
    return out


def test_jgroups212_discards_come_from_its_wire_profile() -> None:
    base = load_base(JG212)
    ctx = context_for(scenario_of(base), real=True)
    assert ctx.wire == "jgroups-2.12" and not ctx.native and ctx.real and "UNICAST2" in ctx.protocols
    matches = [f["match"] for s in draws(base) for f in s if f["kind"] == "discard"]
    assert matches, "discards are drawn for a system with a wire profile"
    for m in matches:
        parse_match(str(m), "jgroups-2.12")
    assert {str(m).split(".")[0] for m in matches} <= set(wire_headers("jgroups-2.12"))
    kinds = {f["kind"] for s in draws(base) for f in s}
    assert "close-connection" not in kinds


def test_no_discards_without_a_wire_profile_or_over_tcp() -> None:
    base = load_base(NAIVE)
    assert context_for(scenario_of(base), real=True).wire == "none"
    assert not [f for s in draws(base) for f in s if f["kind"] == "discard"]
    tcp = load_base(REPO / "scenarios" / "one-way-split.toml", ["cluster.transport=tcp"])
    ctx = context_for(scenario_of(tcp), real=True)
    kinds = {f["kind"] for s in draws(tcp) for f in s}
    assert not ctx.discards and "discard" not in kinds
    assert kinds & {"partition", "split", "loss"}, "on real members the kernel's TCP repairs dropped packets"


@pytest.mark.parametrize("real", [False, True])
def test_chaosbed_own_member_keeps_its_context(real: bool) -> None:
    sc = scenario_of(load_base(OWN))
    ctx = context_for(sc, real=real)
    assert ctx.native and ctx.wire == "chaosbed" and ctx.protocols == ("UNICAST2",) and ctx.real == real


def test_per_system_settings_of_the_files_own_faults_are_left_out_with_them() -> None:
    base = load_base(JG212, ["cluster.system=jgroups-2.12-unicast"])
    assert "faults" not in base and base["per_system"]["jgroups-2.12-unicast"] == {}
    sc = scenario_of(base)  # before: "faults.0.match" made a `faults` table of its own (exit 2)
    assert sc.system.name == "jgroups-2.12-unicast" and sc.faults == []
    assert "faults" in load_base(JG212, ["cluster.system=jgroups-2.12-unicast"], keep_faults=True)


@pytest.mark.parametrize("seed_file", ["unicast3-receiver-sync", "nakack4-window-full"])
def test_a_stack_file_beside_the_scenario_is_found_from_any_working_directory(
    seed_file: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seeds name their stack files relative to their own folder (scenarios/seeds/stacks/): explore loads them
    as `chaosbed run` does (the 5.5.6 hunt found every such seed refused: "no stack file ... (from /work/main)")."""
    path = (Path(__file__).resolve().parents[2] / "scenarios" / "seeds" / f"{seed_file}.toml").resolve()
    monkeypatch.chdir(tmp_path)
    base = load_base(path)
    stack = Path(str(base["cluster"]["stack"]))  # type: ignore[index]
    assert stack.is_absolute() and stack.is_file() and stack.parent.name == "stacks"
    scenario_of(base)  # valid as a whole
