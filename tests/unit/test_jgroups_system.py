"""The real JGroups 2.12 jar as named systems (orchestration/systems/): jgroups-2.12 and jgroups-2.12-unicast, their
stacks as cluster.stack, discards read in their wire profile (a rule name the profile does not know is refused naming
the field), [per_system] settings that let one file run on several systems, bug files without a fix, matrix cells
that name their system and skip with the reason where the system cannot run, the process backend's loopback blocks,
and `chaosbed fault discard --list`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import orchestration.matrix.bugs as bugs_module
import orchestration.matrix.spec as spec_module
from orchestration.backends.foreign import LOOPBACK_BLOCKS, loopback_ports
from orchestration.cli.main import main
from orchestration.scenario import ScenarioError, load, parse
from orchestration.systems import SYSTEMS, System, system_of, unavailable
from orchestration.systems.clusters import spec_of

CATALOGUE = Path(__file__).resolve().parents[2] / "scenarios" / "bugs"


def scenario(cluster: dict[str, Any], **rest: Any) -> dict[str, Any]:
    return {"cluster": {"members": 2, **cluster}, **rest}


def refused(raw: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as e:
        parse(raw)
    return str(e.value)


def discard(match: str) -> list[dict[str, Any]]:
    return [{"kind": "discard", "match": match, "from": "A", "to": "B", "count": 1}]


def test_the_jgroups_systems() -> None:
    for name, stack in (("jgroups-2.12", "unicast2-fast"), ("jgroups-2.12-unicast", "unicast-fast")):
        s = SYSTEMS[name]
        assert (s.wire, s.stack, s.control, s.views, s.one_by_one) == ("jgroups-2.12", stack, True, True, True)
        assert s.stacks == ("unicast2", "unicast", "unicast2-fast", "unicast-fast") and s.process_ip == "127.0.0.1"
        assert s.command[-2:] == ("chaosbed.jgroups.Member", "{config}") and s.command[0].endswith("/java")
        assert s.backends == ("process", "netns", "docker")
        assert System.from_dict(s.to_dict()) == s  # a ClusterSpec carries it through the state file


def test_cluster_stack_picks_one_of_its_stacks() -> None:
    sc = parse(scenario({"system": "jgroups-2.12", "stack": "unicast2"}))
    assert sc.stack == "unicast2" and sc.system.label == "jgroups-2.12 (unicast2)"
    spec = spec_of(sc.system, sc.members, "netns", stack=sc.stack)
    assert spec.stack == "unicast2" and system_of(spec.system).stack == "unicast2"
    assert parse(scenario({"system": "jgroups-2.12"})).stack == "unicast2-fast"
    message = refused(scenario({"system": "jgroups-2.12", "stack": "unicast3"}))
    assert message == (
        "cluster.stack: unknown stack 'unicast3' for system 'jgroups-2.12'; its stacks: unicast2, unicast, "
        "unicast2-fast, unicast-fast"
    )
    assert refused(scenario({"system": "jgroups-2.12", "properties": {"unicast3": {}}})).startswith(
        "cluster.properties: refused for system 'jgroups-2.12'"
    )


def test_a_discard_is_read_in_the_systems_wire_profile() -> None:
    ok = parse(scenario({"system": "jgroups-2.12"}, faults=discard("UNICAST2.DATA(first=true)")))
    assert ok.faults[0].args["match"] == "UNICAST2.DATA(first=true)"
    assert parse(scenario({"system": "jgroups-2.12"}, faults=discard("NAKACK2.MSG(seqno=7)")))  # an alias
    message = refused(scenario({"system": "jgroups-2.12"}, faults=discard("UNICAST3.ACK(seqno=50)")))
    assert message.startswith("faults[0].match: unknown JGroups 2.12 header UNICAST3.ACK; valid headers: ")
    assert message.endswith("(wire profile jgroups-2.12)")
    message = refused(scenario({"system": "jgroups-2.12"}, faults=discard("UNICAST2.DATA(seq=6)")))
    assert message.startswith("faults[0].match: UNICAST2.DATA has no field 'seq'; its fields: seqno, conn_id, first")
    # and chaosbed's own wire refuses JGroups' names it does not have
    message = refused(scenario({}, faults=discard("NAKACK.MSG(seqno=7)")))
    assert message.startswith("faults[0].match: unknown header NAKACK.MSG") and "(wire profile chaosbed)" in message


PER_SYSTEM = """
name = "p"
[cluster]
members = 2
system = "jgroups-2.12"
[[faults]]
kind = "discard"
match = "UNICAST2.DATA(seqno=6)"
from = "A"
to = "B"
[per_system.chaosbed]
"cluster.stack" = "unicast3"
"faults.0.match" = "UNICAST3.DATA(seqno=5)"
[per_system."jgroups-2.12-unicast"]
"faults.0.match" = "UNICAST.DATA(seqno=6)"
"""


def test_per_system_settings_apply_to_their_system_below_every_other_setting(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(PER_SYSTEM)
    assert load(path).faults[0].args["match"] == "UNICAST2.DATA(seqno=6)"
    mine = load(path, settings={"cluster.system": "chaosbed"})
    assert (mine.system.name, mine.stack, mine.faults[0].args["match"]) == (
        "chaosbed",
        "unicast3",
        "UNICAST3.DATA(seqno=5)",
    )
    assert (
        load(path, overrides=["cluster.system=jgroups-2.12-unicast"]).faults[0].args["match"] == "UNICAST.DATA(seqno=6)"
    )
    wins = load(path, settings={"cluster.system": "chaosbed"}, overrides=["faults.0.match=UNICAST3.ACK()"])
    assert wins.faults[0].args["match"] == "UNICAST3.ACK()"  # --set over per_system
    assert "per_system" not in wins.raw  # applied: a run folder's scenario.toml replays without it
    bad = tmp_path / "bad.toml"
    bad.write_text(PER_SYSTEM.replace('[per_system."jgroups-2.12-unicast"]', "[per_system]\nx = 1\n[per_system.y]"))
    with pytest.raises(ScenarioError, match=r"per_system\.x: a table of dotted keys"):
        load(bad)


BUG = """
name = "b"
[cluster]
members = 2
system = "jgroups-2.12"
[bug]
id = "X-1"
title = "t"
flawed = {}
%s
violates = ["complete"]
"""


def test_a_bug_without_a_fix_has_the_flawed_variant_only() -> None:
    import tomllib

    bug = parse(tomllib.loads(BUG % 'no_fix = "none in 2.12"')).bug
    assert bug is not None and bug.variants == ("flawed",) and bug.no_fix == "none in 2.12"
    with pytest.raises(ValueError, match="variant must be one of flawed"):
        bug.settings("fixed")
    with pytest.raises(ScenarioError, match=r"bug\.fixed: a bug with no_fix has no fixed variant"):
        parse(tomllib.loads(BUG % 'no_fix = "none"\nfixed = {}'))
    with pytest.raises(ScenarioError, match=r"bug\.fixed: a table of --set keys"):
        parse(tomllib.loads(BUG % ""))


def test_the_catalogue_names_the_jar_and_skips_it_where_it_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = bugs_module.catalogue()
    jar = [e for e in entries if not load(e.path).system.native]
    assert {e.bug.id for e in jar} >= {"JGRP-1548", "JGRP-1563", "JGRP-1904"} and len(jar) >= 4
    both = bugs_module.find(entries, "jgrp-1548")  # chaosbed's model and the jar's
    assert {e.path.stem for e in both} == {"unicast2-last-message", "jgroups-unicast2-last-message"}
    m = bugs_module.bug_matrix(jar, ["sim", "netns"])
    on_sim = [c for c in m.cells if c.backend == "sim"]
    assert on_sim and all("not sim" in c.skip for c in on_sim)
    assert [c.label for c in m.cells if c.scenario.stem == "jgroups-nakack-last-message"] == ["flawed", "flawed"]
    assert {c.system for c in m.cells if c.scenario.stem == "jgroups-unicast2-last-message"} == {
        "jgroups-2.12 (unicast2-fast)",
        "jgroups-2.12-unicast (unicast-fast)",
    }
    monkeypatch.setattr(bugs_module, "unavailable", lambda system: "no JDK here")
    assert all(c.skip for c in bugs_module.bug_matrix(jar, ["netns"]).cells)
    monkeypatch.setattr(spec_module, "unavailable", lambda system: "no JDK here" if system.requires else None)
    cells = spec_module.expand(
        [CATALOGUE / "jgroups-unicast2-last-message.toml"], {"cluster.system": ["chaosbed", "jgroups-2.12"]}
    )
    assert [(c.system, c.skip) for c in cells] == [
        ("chaosbed (unicast3)", ""),
        ("jgroups-2.12 (unicast2-fast)", "no JDK here"),
    ]


def test_unavailable_says_what_the_machine_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    from foreign import jgroups

    monkeypatch.setenv(jgroups.JAR_ENV, "/nonexistent/jgroups.jar")
    assert "the JGroups 2.12 jar /nonexistent/jgroups.jar is missing" in str(unavailable(SYSTEMS["jgroups-2.12"]))
    assert unavailable(SYSTEMS["chaosbed"]) is None


def test_loopback_blocks() -> None:
    ports, mcast = loopback_ports(0, 26)
    assert ports[0] == 20_000 and ports[-1] == 20_050 and mcast == 20_059
    _, mcast = loopback_ports(LOOPBACK_BLOCKS - 1, 3)
    assert mcast < 32_768  # below Linux's ephemeral ports
    with pytest.raises(ValueError):
        loopback_ports(0, 27)


def test_fault_discard_lists_a_systems_rule_names() -> None:
    out = CliRunner().invoke(main, ["fault", "discard", "--list", "--system", "jgroups-2.12"])
    assert out.exit_code == 0, out.output
    assert "UNICAST2.DATA(seqno, conn_id, first)" in out.output and "NAKACK.XMIT_REQ(low, high)" in out.output
    own = CliRunner().invoke(main, ["fault", "discard", "--list", "--system", "chaosbed"])
    assert "UNICAST3.ACK(seqno, conn_id, timestamp)" in own.output and "NAKACK.MSG" not in own.output
    unknown = CliRunner().invoke(main, ["fault", "discard", "--list", "--system", "my-gossip"])
    assert unknown.exit_code != 0 and "unknown system 'my-gossip'" in unknown.output
    bare = CliRunner().invoke(main, ["fault", "discard"])
    assert bare.exit_code == 2 and "give MATCH" in bare.output
