"""explore's generator (orchestration/explore/generator.py): the same seed gives the same schedule whatever the global
random state; every schedule is a valid scenario whose faults heal in time and whose member actions can all be
carried out; every kind the cluster allows is drawn, and only those; discards name the stack's own headers."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from node import wire
from node.units import parse_duration
from orchestration.explore.case import load_base, scenario_of, with_faults
from orchestration.explore.context import Context, context_of
from orchestration.explore.fairness import unfair, unfair_leaves
from orchestration.explore.generator import KINDS, Generator, GeneratorError, Shape, applicable, parse_kinds
from orchestration.explore.search import schedule_rng
from orchestration.scenario import ScenarioError

pytestmark = pytest.mark.sim

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
DRAWS = 300


def base(**cluster: object) -> dict:
    return {
        "name": "gen",
        "timeout": "30s",
        "cluster": {
            "members": 4,
            "stack": "unicast3+nakack2",
            "properties": {"fd": {"interval": "0.5s", "timeout": "2s", "timeout_check_interval": "0.5s"}},
            **cluster,
        },
        "workload": [
            {"kind": "unicast", "from": "*", "to": "*", "count": 100, "rate": 20},
            {"kind": "multicast", "from": ["A"], "count": 100, "rate": 20},
        ],
        "checks": {"views_converge": "10s"},
    }


def ctx_of(raw: dict) -> Context:
    return context_of(scenario_of(raw))


def draws(gen: Generator, n: int = DRAWS) -> list[list[dict]]:
    return [gen.draw(schedule_rng(seed)) for seed in range(n)]


def test_the_same_seed_draws_the_same_schedule_whatever_the_global_random_state() -> None:
    gen = Generator(ctx_of(base()))
    random.seed(1)
    first = [json.dumps(gen.draw(schedule_rng(s))) for s in range(50)]
    random.seed(2)
    random.random()
    again = [json.dumps(Generator(ctx_of(base())).draw(schedule_rng(s))) for s in range(50)]
    assert first == again
    assert len(set(first)) > 45, "different seeds should draw different schedules"


@pytest.mark.parametrize(
    "raw",
    [
        base(),
        base(members=2, stack="unicast3"),
        base(members=3, transport="tcp"),
        base(members=5, stack="unicast3+mcast"),
    ],
    ids=["4-nakack2", "2-unicast3", "3-tcp", "5-mcast"],
)
def test_every_schedule_is_a_valid_scenario_that_heals_within_the_window(raw: dict) -> None:
    if raw["cluster"]["stack"] == "unicast3":
        raw["workload"] = raw["workload"][:1]
    ctx = ctx_of(raw)
    gen = Generator(ctx)
    for faults in draws(gen):
        scenario_of(with_faults(raw, faults, 1))  # ScenarioError if not
        for f in faults:
            at = parse_duration(f["at"])
            assert ctx.start <= at <= ctx.horizon, f
            if "for" in f:
                assert at + parse_duration(f["for"]) <= ctx.horizon + 1e-6, f
            elif f["kind"] not in ("kill", "restart", "pause", "resume", "leave", "close-connection"):
                pytest.fail(f"a network fault without `for` never heals: {f}")


def test_member_actions_can_all_be_carried_out() -> None:
    """Replaying each schedule's member actions in time order: nobody is killed or paused twice, nobody acts while
    down, a restart follows a kill and a resume a pause, and at least two of four members stay up."""
    gen = Generator(ctx_of(base()), ["kill", "kill-restart", "pause", "pause-resume", "leave", "close-connection"])
    for faults in draws(gen):
        state = dict.fromkeys("ABCD", "up")
        for f in sorted(faults, key=lambda f: parse_duration(f["at"])):
            m, kind = f["member"], f["kind"]
            need = {"kill": "up", "pause": "up", "leave": "up", "close-connection": "up", "restart": "killed",
                    "resume": "paused"}[kind]  # fmt: skip
            assert state[m] == need, f"{kind} {m} while {state[m]}: {faults}"
            state[m] = {"kill": "killed", "pause": "paused", "leave": "gone"}.get(kind, "up")
            assert sum(s == "up" for s in state.values()) >= 2, faults


def test_every_kind_the_cluster_allows_is_drawn_and_only_those() -> None:
    seen = Counter(f["kind"] for faults in draws(Generator(ctx_of(base())), 600) for f in faults)
    for kind in ("partition", "split", "loss", "delay", "duplicate", "reorder", "discard", "kill", "restart", "pause",
                 "resume", "leave", "close-connection"):  # fmt: skip
        assert seen[kind], f"{kind} never drawn: {seen}"
    tcp = Counter(f["kind"] for faults in draws(Generator(ctx_of(base(members=3, transport="tcp")))) for f in faults)
    assert not set(tcp) & {"partition", "split", "loss", "discard", "duplicate", "reorder"}, tcp
    solo = ctx_of({**base(members=2, stack="unicast3"), "workload": base()["workload"][:1]})
    assert not applicable(solo, "leave") and not applicable(solo, "overlap") and applicable(solo, "discard")


def test_kills_only_where_failure_detection_converges_within_the_views_bound() -> None:
    slow = base()
    slow["cluster"]["properties"] = {"fd": {"timeout": "30s"}}
    assert applicable(ctx_of(base()), "kill") and not applicable(ctx_of(slow), "kill")
    assert not any(f["kind"] == "kill" for faults in draws(Generator(ctx_of(slow))) for f in faults)


def test_discards_match_the_stacks_own_headers_with_seqnos_of_the_workload() -> None:
    for stack, protocols in (
        ("unicast3", {"UNICAST3"}),
        ("unicast3+mcast", {"UNICAST3", "MCAST", "GMS", "FD", "MERGE"}),
    ):
        raw = base(stack=stack)
        if stack == "unicast3":
            raw["workload"] = raw["workload"][:1]
        gen = Generator(ctx_of(raw), ["discard"])
        matches = [f["match"] for faults in draws(gen) for f in faults]
        assert {m.split(".")[0] for m in matches} == protocols
        assert all(m.split("(")[0].split(".")[1] in {h for p, h, _, _ in wire.HEADER_TABLE} for m in matches)
        seqnos = {int(m.split("seqno=")[1].rstrip(")").split(",")[0]) for m in matches if "seqno=" in m}
        assert seqnos and seqnos <= {1, 50, 100, 200}, seqnos


def test_kinds_are_chosen_by_name_and_bad_ones_are_refused() -> None:
    assert parse_kinds("split,loss") == ["split", "loss"]
    assert set(parse_kinds("all")) == set(KINDS)
    gen = Generator(ctx_of(base()), parse_kinds("split"))
    assert {f["kind"] for faults in draws(gen, 50) for f in faults} <= {"split", "partition"}
    with pytest.raises(GeneratorError, match="unknown kind 'nope'"):
        parse_kinds("split,nope")
    with pytest.raises(GeneratorError, match="none of the kinds leave"):
        Generator(ctx_of({**base(members=2, stack="unicast3"), "workload": base()["workload"][:1]}), ["leave"])
    with pytest.raises(GeneratorError, match="layout"):
        Shape(layout="spiral")


def test_rounds_follow_each_other_and_the_window_is_kept() -> None:
    shape = Shape(moves=(3, 3), duration=(0.2, 1.0), layout="rounds", gaps=(0.5,), window=(0.5, 100.0))
    for faults in draws(Generator(ctx_of(base()), ["split"], shape), 100):
        starts = sorted({parse_duration(f["at"]) for f in faults if f["kind"] == "split"})
        ends = sorted({parse_duration(f["at"]) + parse_duration(f["for"]) for f in faults if f["kind"] == "split"})
        assert starts[0] == pytest.approx(0.5, abs=1e-3)
        for end, nxt in zip(ends, starts[1:], strict=False):
            assert nxt == pytest.approx(end + 0.5, abs=2e-3)


def test_a_catalogue_file_is_a_base_without_its_faults_and_bug_table() -> None:
    raw = load_base(SCENARIOS / "bugs" / "unicast3-sync-storm.toml")
    assert "faults" not in raw and "bug" not in raw and raw["cluster"]["stack"] == "unicast3"
    kept = load_base(SCENARIOS / "bugs" / "unicast3-sync-storm.toml", keep_faults=True)
    assert len(kept["faults"]) == 3 and "bug" not in kept
    with pytest.raises(ScenarioError, match=r"cluster\.stack"):
        load_base(SCENARIOS / "bugs" / "unicast3-sync-storm.toml", ["cluster.stack=nope"])


def test_moves_come_with_companion_discards_only_where_discards_are_drawn() -> None:
    """A close is at times followed by a discard of the reopened connection's first DATA, a leave by one of its GMS
    messages, a split by MERGE.INFO across it held past the heal; never when discards were not asked for."""
    gen = Generator(ctx_of(base()), ["close-connection", "leave", "split", "discard"])
    matches = Counter(f["match"] for faults in draws(gen) for f in faults if f["kind"] == "discard")
    for m in ("UNICAST3.DATA(first=1)", "MERGE.INFO()"):
        assert matches[m], matches
    assert any(matches[m] for m in ("GMS.VIEW()", "GMS.LEAVE_REQ()", "GMS.LEAVE_RSP()", "GMS.VIEW_ACK()")), matches
    gen = Generator(ctx_of(base()), ["close-connection", "leave", "split"])
    assert not any(f["kind"] == "discard" for faults in draws(gen) for f in faults)


def test_no_leave_the_scenario_could_not_survive() -> None:
    """No leave within 1 s of the workload's end (the run would end before it is over), and, where failure detection
    is slower than the views' bound, none while a partition or split is in force (members cut off from the leaver
    keep its view until failure detection suspects it); the shrinker leaves such scenarios out too."""
    slow = base()
    slow["cluster"]["properties"] = {"fd": {"timeout": "30s"}}
    for raw in (base(), slow):
        ctx = ctx_of(raw)
        gen = Generator(ctx, ["leave", "split", "partition"])
        leaves = 0
        for faults in draws(gen):
            assert unfair_leaves(faults, ctx) == []
            assert unfair(with_faults(raw, faults, 1)) is None
            leaves += sum(f["kind"] == "leave" for f in faults)
        assert leaves > 20
    late = with_faults(base(), [{"at": "4.5s", "kind": "leave", "member": "A"}], 1)  # the workload ends at 5 s
    assert "unfair leave of A" in (unfair(late) or "")
    one = base()
    one["workload"] = [{"kind": "unicast", "from": "*", "to": "*", "count": 1, "rate": 200}]  # all sent at once
    assert unfair(with_faults(one, [{"at": "0s", "kind": "leave", "member": "A"}], 1)) is not None
    cut = [{"at": "1s", "kind": "split", "groups": [["A", "B"], ["C", "D"]], "for": "3s"},
           {"at": "2s", "kind": "leave", "member": "A"}]  # fmt: skip
    assert unfair(with_faults(slow, cut, 1)) is not None and unfair(with_faults(base(), cut, 1)) is None


def test_a_timeout_that_leaves_faults_no_room_is_named_with_the_timeout_that_would() -> None:
    """5 s of workload (100 at 20/s), 10 s of views_converge and the 3 s margin: a 12 s timeout leaves 0-0.2 s."""
    from orchestration.explore.context import short_window

    raw = {**base(), "timeout": "12s"}
    ctx = ctx_of(raw)
    assert (ctx.start, ctx.horizon, ctx.end) == (0.0, 0.2, 5.0)
    note = short_window(ctx, 12.0)
    assert note is not None and "drawn in 0-0.2 s only" in note and "until 5 s" in note, note
    assert 'timeout = "19s"' in note and "views_converge" in note, "5 + 1 + 10 + 3"
    assert short_window(ctx_of(base()), 30.0) is None, "30 s leaves the whole workload"
    for faults in draws(Generator(ctx), 50):
        assert all(parse_duration(f["at"]) <= 0.2 for f in faults)


@pytest.mark.parametrize("system", ["chaosbed", "jgroups-5"])
def test_a_pause_never_resumed_is_unfair_while_views_must_converge(system: str) -> None:
    """The 5.5.6 hunt's membership-split-merge shrank to `pause D at 1.713s` alone (a half-of-the-faults step took
    D's resume, not its pause): D kept its old view, A removed it, views_converge failed 10 of 10, the test bed's
    doing. With views_converge on, such a pause is unfair; with its resume, or views_converge off and nothing owed to
    D, it is fair."""
    seeds = Path(__file__).resolve().parents[2] / "scenarios" / "seeds"
    raw = load_base(seeds / "membership-split-merge.toml", [f'cluster.system="{system}"'])
    pause = {"at": "1.713s", "kind": "pause", "member": "D"}
    resume = {"at": "4.053s", "kind": "resume", "member": "D"}
    assert "D paused at 1.713s and never resumed" in (unfair(with_faults(raw, [pause], 1)) or "")
    assert unfair(with_faults(raw, [pause, resume], 1)) is None
    quiet = {**raw, "checks": {**raw["checks"], "views_converge": False}, "workload": []}  # type: ignore[dict-item]
    assert unfair(with_faults(quiet, [pause], 1)) is None
