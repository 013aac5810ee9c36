"""Nemeses (chaos/nemesis.py): every kind is seeded and replayable, produces valid scenario faults over existing
members, keeps its rounds apart, and does what its name says (majority ring, bridge, kill then restart, ...)."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.nemesis import FLAPS, KINDS, MIN_MEMBERS, NemesisError, derive_seed, describe, schedule
from node.units import parse_duration
from orchestration.scenario import Fault, parse

START, INTERVAL, DURATION = 1.0, 2.0, 1.5
NAMES = [chr(ord("A") + i) for i in range(7)]
RANDOM_KINDS = list(KINDS)  # every kind chooses something at random

small = settings(max_examples=15, deadline=None, derandomize=True)


def make(kind: str, n: int, seed: int, rounds: int = 3, **kw: Any) -> list[dict[str, Any]]:
    timing = {"start": START, "interval": INTERVAL, "duration": DURATION, **kw}
    return schedule(kind, NAMES[:n], seed=seed, rounds=rounds, **timing)


def validated(raw_faults: list[dict[str, Any]], members: list[str]) -> list[Fault]:
    """The faults as orchestration.scenario parses them in a minimal scenario (raises ScenarioError if invalid)."""
    return parse({"cluster": {"members": members}, "faults": raw_faults}).faults


def by_round(faults: list[Fault]) -> dict[int, list[Fault]]:
    rounds: dict[int, list[Fault]] = {}
    for f in faults:
        rounds.setdefault(math.floor((f.at - START) / INTERVAL + 1e-9), []).append(f)
    return rounds


def cut_links(faults: list[Fault], members: list[str]) -> set[tuple[str, str]]:
    """Directed links (sender, receiver) that the partitions and splits among `faults` cut."""
    cut = set()
    for f in faults:
        if f.kind == "partition":
            pairs = {(a, b) for a in f.members("from") for b in f.members("to") if a != b}
            cut |= pairs if f.args.get("one_way") else pairs | {(b, a) for a, b in pairs}
        elif f.kind == "split":
            groups = f.args["groups"]
            cut |= {(a, b) for g in groups for h in groups if h is not g for a in g for b in h}
    return cut


def heard_by(x: str, cut: set[tuple[str, str]], members: list[str]) -> set[str]:
    """Whom x hears (itself included)."""
    return {y for y in members if (y, x) not in cut}


# --- every kind -------------------------------------------------------------------------------------------------


def test_kinds_are_documented() -> None:
    assert set(KINDS) == set(MIN_MEMBERS)
    for kind, line in KINDS.items():
        assert kind == kind.lower() and " " not in kind and "_" not in kind
        assert line and "\n" not in line


@pytest.mark.parametrize("kind", list(KINDS))
@small
@given(n=st.integers(3, 7), seed=st.integers(0, 2**32), rounds=st.integers(1, 4))
def test_deterministic_valid_and_rounds_apart(kind: str, n: int, seed: int, rounds: int) -> None:
    members = NAMES[:n]
    raw = make(kind, n, seed, rounds)
    assert raw == make(kind, n, seed, rounds)  # same seed, same schedule
    faults = validated(raw, members)
    assert len(faults) == len(raw) > 0
    assert [f.at for f in faults] == sorted(f.at for f in faults)
    for f in faults:
        for key in ("from", "to"):
            assert set(f.members(key)) <= set(members)
        assert f.args.get("member", "A") in members
        for g in f.args.get("groups", []):
            assert set(g) <= set(members)
    rs = by_round(faults)
    assert set(rs) == set(range(rounds))
    for i, fs in rs.items():
        begin = START + i * INTERVAL
        assert min(f.at for f in fs) == pytest.approx(begin)
        for f in fs:
            assert begin - 1e-9 <= f.at and f.at + (f.duration or 0.0) <= begin + DURATION + 1e-9


@pytest.mark.parametrize("kind", RANDOM_KINDS)
def test_different_seeds_give_different_schedules(kind: str) -> None:
    for n in (3, 5):
        schedules = [repr(make(kind, n, seed, rounds=5)) for seed in range(6)]
        assert len(set(schedules)) >= (2 if n == 3 else 6), (kind, n)


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_member_count_each_kind_needs(kind: str) -> None:
    need = MIN_MEMBERS[kind]
    assert make(kind, need, 1)
    if need > 1:
        with pytest.raises(NemesisError, match=rf"{kind} needs at least {need} members, there (is|are) {need - 1}"):
            make(kind, need - 1, 1)


def test_seed_derivation_for_scenarios() -> None:
    assert derive_seed(7, 0) == derive_seed(7, 0)
    assert len({derive_seed(s, i) for s in range(5) for i in range(5)}) == 25


def test_times_are_duration_strings_without_float_noise() -> None:
    raw = schedule("kill-restart", ["A", "B"], seed=3, start=0.1, interval=0.1, duration=0.05, rounds=5)
    assert [f["at"] for f in raw] == [
        "0.1s",
        "0.15s",
        "0.2s",
        "0.25s",
        "0.3s",
        "0.35s",
        "0.4s",
        "0.45s",
        "0.5s",
        "0.55s",
    ]
    assert (
        schedule("kill-restart", ["A", "B"], seed=3, start="100ms", interval="100ms", duration="50ms", rounds=5) == raw
    )


# --- what each kind does ----------------------------------------------------------------------------------------


@small
@given(n=st.integers(3, 7), seed=st.integers(0, 2**32))
def test_isolate_one(n: int, seed: int) -> None:
    members = NAMES[:n]
    for fs in by_round(validated(make("isolate-one", n, seed), members)).values():
        (f,) = fs
        (victim,) = f.members("from")
        cut = cut_links(fs, members)
        assert heard_by(victim, cut, members) == {victim}
        for x in members:
            if x != victim:
                assert heard_by(x, cut, members) == set(members) - {victim}


def test_one_way_isolate_goes_both_directions() -> None:
    members = NAMES[:4]
    directions = Counter()
    for seed in range(10):
        for f in validated(make("one-way-isolate", 4, seed), members):
            assert f.args["one_way"] is True
            src, dst = f.members("from"), f.members("to")
            assert len(src) == 1 or len(dst) == 1
            assert sorted(src + dst) == members
            directions["deaf" if len(dst) == 1 else "mute"] += 1
    assert directions["deaf"] > 0 and directions["mute"] > 0


@small
@given(n=st.integers(3, 7), seed=st.integers(0, 2**32))
def test_random_halves(n: int, seed: int) -> None:
    members = NAMES[:n]
    for (f,) in by_round(validated(make("random-halves", n, seed), members)).values():
        a, b = f.args["groups"]
        assert abs(len(a) - len(b)) <= 1 and sorted(a + b) == members


@small
@given(n=st.integers(3, 7), seed=st.integers(0, 2**32))
def test_majority_ring(n: int, seed: int) -> None:
    members = NAMES[:n]
    for fs in by_round(validated(make("majority-ring", n, seed), members)).values():
        assert all(f.kind == "partition" and f.args["one_way"] and len(f.members("to")) == 1 for f in fs)
        cut = cut_links(fs, members)
        heard = [frozenset(heard_by(x, cut, members)) for x in members]
        assert all(len(h) > n / 2 for h in heard)  # a strict majority, counting itself
        assert all(len(h) < n for h in heard)  # but not everyone
        assert len(set(heard)) == n  # no two members hear the same set


@small
@given(n=st.integers(3, 7), seed=st.integers(0, 2**32))
def test_bridge(n: int, seed: int) -> None:
    members = NAMES[:n]
    for fs in by_round(validated(make("bridge", n, seed), members)).values():
        (f,) = fs
        a, b = f.members("from"), f.members("to")
        (bridge,) = set(members) - set(a) - set(b)
        assert a and b and not set(a) & set(b)
        cut = cut_links(fs, members)
        assert heard_by(bridge, cut, members) == set(members)
        assert all(bridge in heard_by(x, cut, members) for x in members)
        for x in a:
            assert not heard_by(x, cut, members) & set(b)
        for x in b:
            assert not heard_by(x, cut, members) & set(a)


@small
@given(n=st.integers(3, 7), seed=st.integers(0, 2**32))
def test_flapping(n: int, seed: int) -> None:
    members = NAMES[:n]
    for fs in by_round(validated(make("flapping", n, seed), members)).values():
        assert len(fs) == FLAPS
        assert len({(tuple(f.members("from")), tuple(f.members("to"))) for f in fs}) == 1  # one link
        assert all(len(f.members("from")) == len(f.members("to")) == 1 and not f.args["one_way"] for f in fs)
        for prev, nxt in itertools.pairwise(fs):
            assert prev.at + prev.duration < nxt.at  # cut, restored, cut again
        assert all(f.duration < DURATION / FLAPS for f in fs)


@pytest.mark.parametrize(
    ("kind", "down", "up"), [("kill-restart", "kill", "restart"), ("pause-resume", "pause", "resume")]
)
@small
@given(n=st.integers(3, 7), seed=st.integers(0, 2**32))
def test_every_kill_is_followed_by_the_restart_of_the_same_member(
    kind: str, down: str, up: str, n: int, seed: int
) -> None:
    members = NAMES[:n]
    faults = validated(make(kind, n, seed, rounds=4), members)
    assert [f.kind for f in faults] == [down, up] * 4
    for d, u in zip(faults[::2], faults[1::2], strict=True):
        assert d.args["member"] == u.args["member"]
        assert u.at == pytest.approx(d.at + DURATION)


def test_combined_mixes_kinds_and_pairs_its_kills() -> None:
    members = NAMES[:5]
    faults = validated(make("combined", 5, 11, rounds=40), members)
    kinds = {f.kind for f in faults}
    assert {"partition", "split", "kill", "pause"} <= kinds
    down: dict[str, str] = {}
    for f in faults:
        if f.kind in ("kill", "pause"):
            assert f.args["member"] not in down
            down[f.args["member"]] = f.kind
        elif f.kind in ("restart", "resume"):
            assert down.pop(f.args["member"]) == {"restart": "kill", "resume": "pause"}[f.kind]
    assert not down


def test_combined_uses_only_kinds_the_member_count_allows() -> None:
    two = validated(make("combined", 2, 5, rounds=30), NAMES[:2])
    assert "split" not in {f.kind for f in two}  # no halves, ring or bridge with two members
    assert all(len(f.members("from")) == 1 for f in two if f.kind == "partition")
    one = validated(make("combined", 1, 5, rounds=10), NAMES[:1])
    assert {f.kind for f in one} == {"kill", "restart", "pause", "resume"}


def test_members_with_names_other_than_letters() -> None:
    members = ["node-1", "node-2", "node-3", "node-4"]
    raw = schedule("majority-ring", members, seed=1, start=0, interval=1, duration=0.5, rounds=2)
    assert len(validated(raw, members)) == 8


# --- errors and describe ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "key", "message"),
    [
        ({"kind": "chaos-monkey"}, "kind", r"unknown nemesis kind 'chaos-monkey'; kinds: isolate-one, .*combined"),
        ({"members": ["A", "A", "B"]}, "members", "distinct"),
        ({"members": "ABC"}, "members", "a list of member names"),
        ({"seed": "7"}, "seed", "must be an integer"),
        ({"seed": True}, "seed", "must be an integer"),
        ({"start": -1}, "start", "non-negative"),
        ({"interval": "soon"}, "interval", "not a duration"),
        ({"interval": 0}, "interval", "must be > 0"),
        ({"duration": 0}, "for", "must be > 0"),
        ({"duration": 2.0}, "for", r"must be shorter than interval \(2s >= 2s\)"),
        ({"duration": float("inf")}, "for", "finite"),
        ({"rounds": 0}, "rounds", "must be an integer >= 1"),
        ({"rounds": 1.5}, "rounds", "must be an integer >= 1"),
    ],
)
def test_errors_name_the_field_and_the_reason(change: dict[str, Any], key: str, message: str) -> None:
    args: dict[str, Any] = {
        "kind": "bridge",
        "members": ["A", "B", "C"],
        "seed": 1,
        "start": 0,
        "interval": 2.0,
        "duration": 1.0,
        "rounds": 2,
    }
    args.update(change)
    with pytest.raises(NemesisError, match=message) as e:
        schedule(args.pop("kind"), args.pop("members"), **args)
    assert e.value.key == key and str(e.value).startswith(f"{key}: ")
    assert isinstance(e.value, ValueError)


def test_describe_gives_one_line_per_fault() -> None:
    raw = make("combined", 4, 2, rounds=6)
    lines = describe(raw)
    assert len(lines) == len(raw)
    for f, line in zip(raw, lines, strict=True):
        assert f["at"] in line and f["kind"] in line
        for name in f.get("from", []) + f.get("to", []) + [f.get("member", "")]:
            assert name in line
    assert describe([{"at": 2, "kind": "partition", "from": "A", "to": ["B"], "one_way": True, "for": 1.5}]) == [
        "        2s  partition  B stops hearing A, for 1.5s"
    ]
    assert describe([{"at": "1s", "kind": "split", "groups": [["A"], ["B", "C"]]}]) == [
        "        1s  split      A | B, C"
    ]
    assert describe([{"at": "0s", "kind": "partition", "from": "A", "to": "*"}]) == [
        "        0s  partition  A and everyone do not hear each other"
    ]
    assert "probability=0.1" in describe([{"kind": "loss", "from": "A", "to": "B", "probability": 0.1}])[0]


def test_times_parse_back_to_the_rounds() -> None:
    raw = make("isolate-one", 4, 9, rounds=3, start="250ms", interval="1.5s", duration="1s")
    assert [parse_duration(f["at"]) for f in raw] == [0.25, 1.75, 3.25]
    assert {f["for"] for f in raw} == {"1s"}


def test_cli_prints_the_schedule_and_its_scenario_table() -> None:
    from click.testing import CliRunner

    from orchestration.cli.main import main

    result = CliRunner().invoke(main, ["nemesis", "isolate-one", "-n", "4", "--seed", "9", "--rounds", "2"])
    assert result.exit_code == 0, result.output
    lines = describe(schedule("isolate-one", list("ABCD"), seed=9, start="1s", interval="4s", duration="2s", rounds=2))
    assert all(line.strip() in result.output for line in lines)
    assert '[[nemesis]]\nkind = "isolate-one"' in result.output
    bad = CliRunner().invoke(main, ["nemesis", "bridge", "-n", "2"])
    assert bad.exit_code != 0 and "needs at least 3 members" in bad.output
