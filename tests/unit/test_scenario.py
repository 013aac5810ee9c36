"""Scenario files: the SCENARIO.md example parses; every kind of mistake names its field and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration.scenario import FAULT_KINDS, ScenarioError, load, parse

EXAMPLE = """
name = "one-way-split-during-stream"
seed = 7
timeout = "60s"

[cluster]
members = 4
stack = "unicast3"
transport = "udp"
[cluster.properties]
unicast3 = { xmit_interval = "200ms", conn_expiry_timeout = "0s" }

[[workload]]
kind = "unicast"
from = "A"
to = "B"
count = 1000
size = 100
rate = 500
start = "0s"

[[faults]]
at = "2s"
kind = "partition"
from = ["A"]
to = ["B"]
one_way = true
for = "5s"

[[faults]]
at = "1s"
kind = "discard"
match = "UNICAST3.ACK(seqno=50)"
from = "B"
to = "A"
count = 1

[checks]
fifo = true
exactly_once = true
complete = true
no_phantoms = true
views_converge = "10s"
"""


def test_the_contract_example_parses(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text(EXAMPLE)
    sc = load(f)
    assert (sc.name, sc.seed, sc.timeout, sc.members) == ("one-way-split-during-stream", 7, 60.0, list("ABCD"))
    assert sc.workloads[0].senders == ["A"] and sc.workloads[0].dests == ["B"] and sc.workloads[0].rate == 500
    p, d = sc.faults
    assert (p.kind, p.at, p.duration, p.args["from"], p.args["one_way"]) == ("partition", 2.0, 5.0, ["A"], True)
    assert (d.kind, d.args["from"], d.args["count"]) == ("discard", ["B"], 1)
    assert sc.checks["views_converge"] == 10.0


def test_set_overrides_and_seed(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text(EXAMPLE)
    sc = load(
        f, ["cluster.stack=unicast2", "cluster.properties.unicast2.xmit_interval=100ms", "cluster.members=3"], seed=99
    )
    assert (sc.stack, sc.seed, sc.members) == ("unicast2", 99, ["A", "B", "C"])
    assert sc.properties["unicast2"] == {"xmit_interval": "100ms"}


def _with(**edits: object) -> dict:
    import tomllib

    raw = tomllib.loads(EXAMPLE)
    for path, value in edits.items():
        node = raw
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[int(k)] if k.isdigit() else node[k]
        node[keys[-1]] = value
    return raw


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        ({"faults__0__kind": "partiton"}, r"faults\[0\]\.kind: unknown fault kind 'partiton'"),
        ({"faults__0__from": ["Z"]}, r"faults\[0\]\.from: unknown member 'Z'; members: A, B, C, D"),
        ({"faults__0__at": "soon"}, r"faults\[0\]\.at: not a duration"),
        ({"faults__1__match": "UNICAST3.AKC()"}, r"faults\[1\]\.match: unknown header UNICAST3.AKC"),
        ({"faults__1__count": 0}, r"faults\[1\]\.count: must be >= 1"),
        ({"workload__0__kind": "broadcast"}, r"workload\[0\]\.kind: must be unicast or multicast"),
        ({"workload__0__to": "A"}, r"workload\[0\]\.to: no destination other than the sender"),
        ({"workload__0__rate": -5}, r"workload\[0\]\.rate"),
        ({"cluster__stack": "tcp-magic"}, r"cluster\.stack: unknown stack 'tcp-magic'"),
        ({"cluster__members": 0}, r"cluster\.members: must be 1\.\.26"),
        ({"cluster__properties": {"unicast3": {"xmit_interval": "-1s"}}}, r"cluster\.properties: .*xmit_interval"),
        ({"cluster__properties": {"unicast3": {"bogus": 1}}}, r"cluster\.properties: .*unknown property 'bogus'"),
        ({"checks__fifo": "yes"}, r"checks\.fifo: must be true or false"),
        ({"checks__linearizable": True}, r"checks\.linearizable: unknown check"),
        ({"timeout": "forever"}, r"timeout: not a duration"),
        ({"colour": "blue"}, r"colour: unknown key"),
    ],
)
def test_mistakes_name_the_field_and_the_reason(edits: dict, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse(_with(**edits))


def test_fault_kind_specific_keys() -> None:
    raw = _with()
    raw["faults"] = [{"at": "1s", "kind": "kill"}]
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.member: a kill fault needs it"):
        parse(raw)
    raw["faults"] = [{"at": "1s", "kind": "split", "groups": [["A", "B"], ["B", "C"]]}]
    with pytest.raises(ScenarioError, match="one group only"):
        parse(raw)
    raw["faults"] = [{"at": "1s", "kind": "loss", "from": "A", "to": "B", "probability": "150%"}]
    with pytest.raises(ScenarioError, match=r"probability: must be in \[0, 1\]"):
        parse(raw)
    raw["faults"] = [{"at": "1s", "kind": "heal", "member": "A"}]
    with pytest.raises(ScenarioError, match="not a key of a heal fault"):
        parse(raw)
    assert "close-connection" in FAULT_KINDS and "set" in FAULT_KINDS


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read"):
        load(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = ")
    with pytest.raises(ScenarioError, match="not valid TOML"):
        load(bad)
