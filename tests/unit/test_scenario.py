"""Scenario files: the docs/scenario-format.md example parses; every kind of mistake names its field and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.fault_kinds import KINDS
from orchestration.scenario import ScenarioError, load, parse

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
    assert "close-connection" in KINDS and "set" in KINDS


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read"):
        load(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = ")
    with pytest.raises(ScenarioError, match="not valid TOML"):
        load(bad)


# --- [[nemesis]]: seeded fault schedules (chaos/nemesis.py) expanded into faults --------------------------------


def _nemesis(*entries: dict, seed: int = 7) -> dict:
    raw = _with()
    raw["seed"] = seed
    raw["nemesis"] = list(entries)
    return raw


def test_nemesis_entries_expand_into_sorted_faults() -> None:
    from chaos.nemesis import derive_seed, schedule

    entry = {"kind": "kill-restart", "start": "0.5s", "interval": "1s", "for": "300ms", "rounds": 3}
    raw = _nemesis(entry, {"kind": "random-halves", "interval": "4s", "for": "1s"})
    sc = parse(raw)
    assert [f.at for f in sc.faults] == sorted(f.at for f in sc.faults)
    hand = [f for f in sc.faults if f.kind in ("partition", "discard")]
    assert [(f.kind, f.at) for f in hand] == [("discard", 1.0), ("partition", 2.0)]
    kills = [(f.kind, f.at) for f in sc.faults if f.kind in ("kill", "restart")]
    assert kills == [("kill", 0.5), ("restart", 0.8), ("kill", 1.5), ("restart", 1.8), ("kill", 2.5), ("restart", 2.8)]
    (split,) = [f for f in sc.faults if f.kind == "split"]
    assert (split.at, split.duration) == (0.0, 1.0)  # start defaults to 0s, rounds to 1
    expected = schedule(
        "kill-restart", sc.members, seed=derive_seed(7, 0), start=0.5, interval=1, duration=0.3, rounds=3
    )
    assert [f.args["member"] for f in sc.faults if f.kind in ("kill", "restart")] == [f["member"] for f in expected]
    assert raw["nemesis"][0] == entry and sc.raw["nemesis"] == raw["nemesis"]  # kept as written, no seed filled in
    assert "seed" not in sc.raw["nemesis"][0]


def test_nemesis_at_equal_times_hand_written_faults_come_first() -> None:
    sc = parse(_nemesis({"kind": "isolate-one", "start": "2s", "interval": "3s", "for": "1s"}))
    at_two = [f for f in sc.faults if f.at == 2.0]
    assert [f.args.get("one_way") for f in at_two] == [True, False]  # the file's partition, then the nemesis


def test_nemesis_seed_scenario_seed_and_replay() -> None:
    def members(raw: dict) -> list:
        return [(f.kind, f.at, f.args.get("member")) for f in parse(raw).faults if f.kind in ("kill", "restart")]

    entry = {"kind": "kill-restart", "interval": "1s", "for": "0.5s", "rounds": 8}
    assert members(_nemesis(entry)) == members(_nemesis(entry))  # replayable
    by_scenario_seed = {repr(members(_nemesis(entry, seed=s))) for s in range(4)}
    assert len(by_scenario_seed) == 4  # --seed N changes the nemesis
    pinned = [members(_nemesis({**entry, "seed": 42}, seed=s)) for s in range(3)]
    assert pinned[0] == pinned[1] == pinned[2]  # an explicit seed pins it
    assert members(_nemesis({**entry, "seed": 43})) != pinned[0]
    two = parse(_nemesis(entry, dict(entry))).faults  # two equal entries get different derived seeds
    kills = [f.args["member"] for f in two if f.kind == "kill"]
    assert kills[0::2] != kills[1::2]


def test_nemesis_through_load_with_overrides(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text(EXAMPLE + '\n[[nemesis]]\nkind = "majority-ring"\ninterval = "2s"\nfor = "1s"\nrounds = 2\n')
    sc = load(f, ["cluster.members=5"], seed=3)
    ring = [x for x in sc.faults if x.kind == "partition" and x.args["to"] and len(x.args["to"]) == 1]
    assert len(ring) >= 10 and sc.raw["nemesis"][0]["kind"] == "majority-ring"
    assert load(f, seed=3).faults == load(f, seed=3).faults != load(f, seed=4).faults


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"interval": "1s", "for": "0.5s"}, r"nemesis\[0\]\.kind: a nemesis needs it; kinds: isolate-one, "),
        ({"kind": "monkey", "interval": "1s", "for": "0.5s"}, r"nemesis\[0\]\.kind: unknown nemesis kind 'monkey'"),
        ({"kind": "bridge", "for": "0.5s"}, r"nemesis\[0\]\.interval: a nemesis needs it"),
        ({"kind": "bridge", "interval": "1s"}, r"nemesis\[0\]\.for: a nemesis needs it"),
        ({"kind": "bridge", "interval": "1s", "for": "2s"}, r"nemesis\[0\]\.for: must be shorter than interval"),
        ({"kind": "bridge", "interval": "1s", "for": "0s"}, r"nemesis\[0\]\.for: must be > 0"),
        ({"kind": "bridge", "interval": "often", "for": "1s"}, r"nemesis\[0\]\.interval: not a duration"),
        (
            {"kind": "bridge", "interval": "2s", "for": "1s", "start": "-1s"},
            r"nemesis\[0\]\.start: must be a finite, non-negative",
        ),
        ({"kind": "bridge", "interval": "2s", "for": "1s", "rounds": 0}, r"nemesis\[0\]\.rounds: must be >= 1"),
        ({"kind": "bridge", "interval": "2s", "for": "1s", "seed": "x"}, r"nemesis\[0\]\.seed: must be an integer"),
        ({"kind": "bridge", "interval": "2s", "for": "1s", "at": "1s"}, r"nemesis\[0\]\.at: unknown key; a nemesis"),
    ],
)
def test_nemesis_mistakes_name_the_field(entry: dict, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse(_nemesis(entry))


def test_nemesis_member_count_and_shape() -> None:
    raw = _nemesis({"kind": "majority-ring", "interval": "2s", "for": "1s"})
    raw["cluster"]["members"] = 2
    with pytest.raises(ScenarioError, match=r"nemesis\[0\]\.kind: majority-ring needs at least 3 members, there are 2"):
        parse(raw)
    raw = _with()
    raw["nemesis"] = {"kind": "bridge"}
    with pytest.raises(ScenarioError, match=r"nemesis: must be an array of tables \(\[\[nemesis\]\]\)"):
        parse(raw)
    with pytest.raises(ScenarioError, match=r"nemesis\[1\]\.kind"):
        parse(_nemesis({"kind": "bridge", "interval": "2s", "for": "1s"}, {"kind": "?", "interval": 2, "for": 1}))


def test_discard_actions_include_reorder() -> None:
    for action in ("drop", "delay", "duplicate", "reorder"):
        assert parse(_with(faults__1__action=action)).faults[1].args["action"] == action
    with pytest.raises(ScenarioError, match=r"faults\[1\]\.action: drop \| delay \| duplicate \| reorder"):
        parse(_with(faults__1__action="shuffle"))
