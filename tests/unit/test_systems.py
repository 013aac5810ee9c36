"""Systems (orchestration/systems/): the [cluster] table refuses unknown keys, an inline [cluster.member] becomes a
System, what a foreign system cannot do is refused at load time naming the key and the system, and a member's command
gets its placeholders filled (the token never)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from orchestration.scenario import ScenarioError, apply_settings, parse
from orchestration.systems import CHAOSBED, SYSTEMS, System
from orchestration.systems.launch import Launch, template_problem

INLINE = {"command": ["python3", "examples/naive_rb/member.py", "{config}"], "stack": "naive-v1"}


def scenario(cluster: dict[str, Any], **rest: Any) -> dict[str, Any]:
    return {"cluster": {"members": 3, **cluster}, **rest}


def refused(raw: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as e:
        parse(raw)
    return str(e.value)


@pytest.mark.parametrize("key", ["stak", "transprot", "propertes", "systen"])
def test_an_unknown_cluster_key_is_refused_with_the_field(key: str) -> None:
    message = refused(scenario({key: "x"}))
    assert message.startswith(f"cluster.{key}: unknown key; [cluster] has: ")
    assert "stack" in message and "transport" in message


def test_the_default_system_is_chaosbed() -> None:
    sc = parse(scenario({"stack": "unicast3+nakack2"}))
    assert sc.system is CHAOSBED and sc.system.native and sc.stack == "unicast3+nakack2"


def test_an_inline_system() -> None:
    sc = parse(scenario({"system": "naive-rb", "member": INLINE}))
    assert sc.system == System(
        "naive-rb", tuple(INLINE["command"]), None, True, "none", "naive-v1", 1.0, False, sc.system.description, True
    )
    assert not sc.system.views and parse(scenario({"system": "g", "member": {**INLINE, "views": True}})).system.views
    assert sc.stack == "naive-v1" and sc.properties == {}
    assert "sim" not in sc.system.backends and "docker" in sc.system.backends


def test_a_system_goes_through_a_state_file_unchanged() -> None:
    inline_system = parse(scenario({"system": "naive-rb", "member": {**INLINE, "image": "my/naive:1"}})).system
    for s in [*SYSTEMS.values(), inline_system]:
        assert System.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    assert System.from_dict({"name": "bare"}) == System("bare")  # a missing key is the field's default


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"name": "x", "colour": "red"}, "no field 'colour'"),
        ({"command": ["a"]}, "name must be a string"),
        ({"name": "x", "command": "python3 member.py"}, "command must be a list of strings"),
        ({"name": "x", "control": "yes"}, "control must be bool"),
        ({"name": "x", "settle": "1s"}, "settle must be a number"),
        ({"name": "x", "image": 1}, "image must be a string or null"),
    ],
)
def test_a_bad_system_doc_is_a_type_error_naming_the_key(doc: dict[str, object], words: str) -> None:
    with pytest.raises(TypeError, match=words):
        System.from_dict(doc)


def test_a_named_system_and_an_unknown_one() -> None:
    assert parse(scenario({"system": "chaosbed-contract"})).system is SYSTEMS["chaosbed-contract"]
    message = refused(scenario({"system": "my-gossip"}))
    assert message.startswith("cluster.system: unknown system 'my-gossip'") and "[cluster.member]" in message


def test_member_table_with_a_named_system_is_refused() -> None:
    assert refused(scenario({"system": "chaosbed", "member": INLINE})).startswith(
        "cluster.member: 'chaosbed' is a named"
    )


@pytest.mark.parametrize(
    ("member", "path", "words"),
    [
        ({"command": []}, "cluster.member.command", "non-empty list"),
        ({"command": ["m", "{token}"]}, "cluster.member.command[1]", "never on the command line"),
        ({"command": ["m", "--at={nmae}"]}, "cluster.member.command[1]", "unknown placeholder {nmae}"),
        ({"command": ["m", "{"]}, "cluster.member.command[1]", "lone"),
        ({**INLINE, "wire": "jgroups-3.6"}, "cluster.member.wire", "unknown wire profile"),
        ({**INLINE, "control": "yes"}, "cluster.member.control", "true"),
        ({**INLINE, "imgae": "x"}, "cluster.member.imgae", "unknown key"),
        ({**INLINE, "settle": "soon"}, "cluster.member.settle", "not a duration"),
    ],
)
def test_a_bad_member_table_names_the_key(member: dict[str, Any], path: str, words: str) -> None:
    message = refused(scenario({"system": "g", "member": member}))
    assert message.startswith(f"{path}: ") and words in message


@pytest.mark.parametrize(
    ("extra", "path", "words"),
    [
        ({"faults": [{"kind": "set", "member": "A", "property": "unicast3.xmit_interval", "value": 1}]},
         "faults[0].kind", "set is refused for system 'g'"),
        ({"faults": [{"kind": "close-connection", "member": "A", "peer": "B"}]}, "faults[0].kind",
         "close-connection is refused for system 'g'"),
        ({"faults": [{"kind": "discard", "match": "UNICAST3.ACK()"}]}, "faults[0].kind",
         "discard is refused for system 'g': it has no wire profile"),
    ],
)  # fmt: skip
def test_what_a_foreign_system_cannot_do_is_refused(extra: dict[str, Any], path: str, words: str) -> None:
    message = refused(scenario({"system": "g", "member": INLINE}, **extra))
    assert message.startswith(f"{path}: ") and words in message


def test_chaosbed_only_cluster_keys_are_refused_for_a_foreign_system() -> None:
    message = refused(scenario({"system": "g", "member": INLINE, "properties": {"unicast3": {}}}))
    assert message.startswith("cluster.properties: refused for system 'g'")
    assert refused(scenario({"system": "g", "member": INLINE, "stack": "unicast3"})).startswith(
        "cluster.stack: refused for system 'g'"
    )


def test_a_discard_with_a_wire_profile_and_the_member_faults_are_allowed() -> None:
    faults = [
        {"at": "1s", "kind": "discard", "match": "UNICAST3.ACK()"},
        *({"at": "2s", "kind": k, "member": "B"} for k in ("kill", "restart", "pause", "resume", "leave")),
    ]
    sc = parse(scenario({"system": "g", "member": {**INLINE, "wire": "chaosbed"}}, faults=faults))
    assert [f.kind for f in sc.faults] == ["discard", "kill", "restart", "pause", "resume", "leave"]


def test_workloads_need_control() -> None:
    raw = scenario({"system": "g", "member": {**INLINE, "control": False}})
    assert parse(raw).system.control is False
    message = refused({**raw, "workload": [{"kind": "unicast", "from": "A", "to": "B"}]})
    assert message.startswith("workload[0]: system 'g' has no control")


def test_a_foreign_multicast_workload_needs_no_chaosbed_stack() -> None:
    sc = parse(scenario({"system": "g", "member": INLINE}, workload=[{"kind": "multicast", "from": "A"}]))
    assert sc.workloads[0].kind == "multicast"


def test_placeholders_environment_and_config() -> None:
    launch = Launch("B", "10.1.2.11", 7800, 2, "/h/B.jsonl", "/s/B.2.json", "cb123456", "239.1.2.3",
                    {"A": ("10.1.2.10", 7800), "B": ("10.1.2.11", 7800)})  # fmt: skip
    template = ["m", "{config}", "--me={name}@{address}", "{ip}:{port}", "{peers}", "{mcast_group}:{mcast_port}"]
    argv = launch.argv([*template, "{{literal}}", "{history}", "{incarnation}", "{cluster}"])
    assert argv == ["m", "/s/B.2.json", "--me=B@B/2", "10.1.2.11:7800", "A=10.1.2.10:7800", "239.1.2.3:17800",
                    "{literal}", "/h/B.jsonl", "2", "cb123456"]  # fmt: skip
    env = launch.env("secret")
    assert env["CHAOSBED_PEERS"] == "A=10.1.2.10:7800" and env["CHAOSBED_TOKEN"] == "secret"
    assert env["CHAOSBED_ADDRESS"] == "B/2" and env["CHAOSBED_MCAST_PORT"] == "17800"
    doc = launch.config_doc("secret", "udp", "g")
    assert doc["peers"] == {"A": ["10.1.2.10", 7800], "B": ["10.1.2.11", 7800]} and doc["token"] == "secret"
    assert {"name", "address", "ip", "port", "history", "incarnation", "cluster", "mcast_group", "mcast_port"} <= set(
        doc
    )
    assert "secret" not in " ".join(argv)
    assert template_problem("{peers}") is None and template_problem("}") is not None


def test_a_matrix_may_have_the_system_as_an_axis(tmp_path: Path) -> None:
    from orchestration.matrix.spec import load_matrix

    (tmp_path / "s.toml").write_text(
        'name = "s"\n[cluster]\nmembers = 3\n[[workload]]\nkind = "unicast"\nfrom = "A"\nto = "B"\n'
    )
    (tmp_path / "m.toml").write_text(
        'name = "m"\nscenarios = ["s.toml"]\n[axes]\n"cluster.system" = ["chaosbed", "chaosbed-contract"]\n'
        'backend = ["netns"]\n'
    )
    cells = load_matrix(tmp_path / "m.toml").cells
    assert [c.settings for c in cells] == [{"cluster.system": "chaosbed"}, {"cluster.system": "chaosbed-contract"}]
    loaded = [parse(apply_settings(tomllib.loads((tmp_path / "s.toml").read_text()), c.settings)) for c in cells]
    assert [sc.system.name for sc in loaded] == ["chaosbed", "chaosbed-contract"]


TCP_FAULTS = [
    {"at": "1s", "kind": "discard", "match": "UNICAST3.ACK()"},
    *({"at": "2s", "kind": k, "member": "B"} for k in ("kill", "restart", "pause", "resume", "leave")),
    {"at": "3s", "kind": "partition", "from": ["A"], "to": ["B", "C"]},
    {"at": "3s", "kind": "delay", "from": ["A"], "to": ["B"], "delay": "20ms"},
]


@pytest.mark.parametrize(
    ("cluster", "why"),
    [
        ({"transport": "tcp"}, "cluster.transport is tcp"),
        ({"system": "g", "member": {**INLINE, "wire": "chaosbed"}, "transport": "tcp"}, "cluster.transport is tcp"),
        ({"system": "tcp-sys"}, "system 'tcp-sys' runs over tcp"),
    ],
)
def test_a_discard_over_tcp_is_refused_at_load_naming_the_key_and_why(
    cluster: dict[str, Any], why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over TCP a discard cannot cut a message out of a byte stream: refused when the file is read, for chaosbed's
    member, a user's program and a named system that runs over tcp alike; every other fault kind is not."""
    monkeypatch.setitem(SYSTEMS, "tcp-sys", System("tcp-sys", command=("true",), wire="chaosbed", transport="tcp"))
    message = refused(scenario(cluster, faults=TCP_FAULTS))
    assert message.startswith(f"faults[0].kind: discard is refused over TCP ({why}): "), message
    assert "byte stream" in message and "partition" in message, message
    assert [f.kind for f in parse(scenario(cluster, faults=TCP_FAULTS[1:])).faults] == [
        f["kind"] for f in TCP_FAULTS[1:]
    ]


def test_a_named_system_runs_over_its_own_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SYSTEMS, "tcp-sys", System("tcp-sys", command=("true",), transport="tcp"))
    assert parse(scenario({"system": "tcp-sys"})).transport == "tcp"
    assert parse(scenario({"system": "tcp-sys", "transport": "tcp"})).transport == "tcp"
    message = refused(scenario({"system": "tcp-sys", "transport": "udp"}))
    assert message.startswith("cluster.transport: system 'tcp-sys' with stack '' runs over tcp"), message
    assert System.from_dict(System("s", transport="tcp").to_dict()).transport == "tcp"


def _jar_missing() -> str | None:
    """Reading a JGroups 5 system's scenario fetches its jar on first use: these tests want it cached already."""
    from foreign.jgroups.maven import jar_path, verified
    from foreign.jgroups.releases import NEWEST, Release

    release = Release.parse(NEWEST)
    return None if verified(release) else f"no verified jar of JGroups {release} at {jar_path(release)}: make setup"


needs_jgroups5_jar = pytest.mark.skipif(_jar_missing() is not None, reason=str(_jar_missing()))


@needs_jgroups5_jar
def test_a_discard_on_the_jgroups_5_tcp_system_is_refused_and_on_its_udp_ones_read_in_its_names() -> None:
    message = refused(scenario({"system": "jgroups-5-tcp"}, faults=TCP_FAULTS))
    assert message.startswith("faults[0].kind: discard is refused over TCP (system 'jgroups-5-tcp' runs over tcp)")
    for name in ("jgroups-5-udp", "jgroups-5-nakack4"):
        faults = [{"at": "1s", "kind": "discard", "match": "NAKACK4.ACK()" if "nakack4" in name else "UNICAST3.ACK()"}]
        assert SYSTEMS[name].wire == "jgroups-5" and parse(scenario({"system": name}, faults=faults)).faults
    bad = refused(scenario({"system": "jgroups-5-udp"}, faults=[{"at": "1s", "kind": "discard", "match": "X.Y()"}]))
    assert bad.startswith("faults[0].match: unknown JGroups 5 header X.Y"), bad


@needs_jgroups5_jar
def test_chaosbed_run_exits_2_on_a_discard_over_tcp(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from orchestration.cli.main import main

    path = tmp_path / "tcp.toml"
    path.write_text(
        'name = "tcp"\n[cluster]\nsystem = "jgroups-5-tcp"\nmembers = ["A", "B"]\n'
        '[[faults]]\nat = "1s"\nkind = "discard"\nmatch = "UNICAST3.ACK()"\nfrom = "A"\nto = "B"\n'
    )
    result = CliRunner().invoke(main, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "faults[0].kind: discard is refused over TCP" in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_an_inline_systems_leave_is_control_or_sigterm() -> None:
    from orchestration.systems.definition import SystemProblem, inline

    argv = ["python3", "member.py", "{config}"]
    assert inline("mine", {"command": argv}).leave == "sigterm"
    assert inline("mine", {"command": argv, "leave": "control"}).leave == "control"
    for table, words in (({"leave": "maybe"}, '"control" (the `leave` fault sends'),
                         ({"leave": "control", "control": False}, '"control" needs control = true')):  # fmt: skip
        with pytest.raises(SystemProblem) as e:
            inline("mine", {"command": argv, **table})
        assert e.value.path == "cluster.member.leave" and words in e.value.reason
