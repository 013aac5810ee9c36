"""orchestration/explore/guide.py: the corpus keeps what reached a new feature; every mutation of a drawn schedule is
a valid scenario (chaosbed's own member and JGroups 5), touches network faults only, and a retarget aims a discard
at a (sender, receiver, message type) the wire showed."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from orchestration.explore.case import load_base, scenario_of, with_faults
from orchestration.explore.coverage import Coverage
from orchestration.explore.foreign_context import context_for
from orchestration.explore.generator import Generator
from orchestration.explore.guide import NETWORK, OPERATORS, Entry, Guide, mutate

REPO = Path(__file__).resolve().parents[2]
FILES = [REPO / "scenarios" / "partition-heal.toml", REPO / "scenarios" / "jgroups5-split-heal.toml"]


def generator_of(path: Path) -> tuple[dict[str, object], Generator]:
    base = load_base(path)
    return base, Generator(context_for(scenario_of(base), real=True))


def test_the_corpus_keeps_a_schedule_only_when_it_reached_something_new() -> None:
    _, gen = generator_of(FILES[0])
    guide = Guide(gen)
    faults = gen.draw(random.Random(1))
    assert guide.record(faults, Coverage(frozenset({"a", "b"}))) == 2
    assert guide.record(faults, Coverage(frozenset({"b"}))) == 0
    assert guide.record(faults, Coverage(frozenset({"b", "c"})), "shift of #1") == 1
    assert len(guide.corpus) == 2 and dict(guide.origins) == {"random": 1, "shift": 1}
    assert guide.seen == {"a": 1, "b": 3, "c": 1}


def test_without_a_corpus_every_schedule_is_drawn_at_random() -> None:
    _, gen = generator_of(FILES[0])
    guide = Guide(gen)
    for seed in range(20):
        faults, origin = guide.next_faults(random.Random(seed))
        assert origin == "random" and faults == gen.draw(random.Random(seed))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_mutation_is_a_valid_scenario_that_moves_network_faults_only(path: Path) -> None:
    base, gen = generator_of(path)
    applied = dict.fromkeys(OPERATORS, 0)
    for seed in range(60):
        rng = random.Random(seed)
        parent = gen.draw(rng)
        entry = Entry(parent, frozenset(), (("A", "B", "UNICAST3.ACK"), ("B", "A", "tcp")))
        for op in OPERATORS:
            child = mutate(gen, rng, entry, op)
            if child is None:
                continue
            applied[op] += 1
            scenario_of(with_faults(base, child, seed))  # raises ScenarioError if invalid
            others = [f for f in parent if f.get("kind") not in NETWORK]
            assert [f for f in child if f.get("kind") not in NETWORK] == [f for f in others if f in child]
    assert all(n > 0 for n in applied.values()), applied


def test_a_retarget_aims_a_discard_at_a_message_the_wire_showed() -> None:
    _, gen = generator_of(FILES[1])
    entry = Entry([], frozenset(), (("A", "B", "tcp"), ("C", "A", "UNICAST3.ACK"), ("B", "C", "DATA")))
    for seed in range(10):
        child = mutate(gen, random.Random(seed), entry, "retarget")
        assert child is not None
        (discard,) = [f for f in child if f["kind"] == "discard"]
        assert (discard["match"], discard["from"], discard["to"]) == ("UNICAST3.ACK()", ["C"], ["A"])


def test_once_there_is_a_corpus_schedules_are_also_mutated() -> None:
    _, gen = generator_of(FILES[0])
    guide = Guide(gen)
    guide.record(gen.draw(random.Random(3)), Coverage(frozenset({"x"})))
    origins = [guide.next_faults(random.Random(seed))[1] for seed in range(50)]
    mutated = [o for o in origins if o != "random"]
    assert 15 <= len(mutated) <= 45 and all(o.endswith(" of #1") for o in mutated)
    assert sum(guide.drawn.values()) == 50


def test_the_cli_refuses_a_guide_for_the_simulator_and_a_soak(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from orchestration.cli.main import main

    scenario = tmp_path / "s.toml"
    scenario.write_text('[cluster]\nmembers = 3\n[[workload]]\nkind = "unicast"\nfrom = "A"\nto = "B"\nrate = 5\n')
    result = CliRunner().invoke(main, ["explore", str(scenario), "--guide", "wire", "--schedules", "1"])
    assert result.exit_code == 2 and "--guide is for real members" in result.output
    result = CliRunner().invoke(main, ["explore", str(scenario), "--soak", "--backend", "netns", "--guide", "random"])
    assert result.exit_code == 2 and "--guide is for a search" in result.output


@pytest.mark.parametrize(
    "args, guide",
    [
        (["--backend", "netns"], "wire"),
        (["--backend", "netns", "--warm", "20"], "random"),  # a warm cluster runs without the tap
        (["--backend", "netns", "--guide", "random"], "random"),
        (["--backend", "docker"], "random"),
        ([], "random"),  # the simulator
    ],
)
def test_left_out_the_guide_is_the_wire_where_a_tap_can_watch_and_random_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], guide: str
) -> None:
    from click.testing import CliRunner

    from orchestration.cli import explore as cli
    from orchestration.cli.main import main
    from orchestration.explore.session import ExploreSpec

    specs: list[ExploreSpec] = []

    def record(spec: ExploreSpec, reporter: object) -> None:
        specs.append(spec)
        raise SystemExit(0)  # the search itself is not the point here

    monkeypatch.setattr(cli, "_run", record)
    result = CliRunner().invoke(main, ["explore", str(FILES[0]), *args, "--schedules", "1", "--out", tmp_path / "x"])
    assert result.exit_code == 0, result.output
    assert [s.guide for s in specs] == [guide]


def test_where_no_tap_can_watch_the_search_draws_at_random_and_says_so(tmp_path: Path) -> None:
    from orchestration.explore.real_session import _guide
    from orchestration.explore.search import SearchSpec
    from orchestration.explore.session import ExploreSpec

    said: list[str] = []

    class Say:
        def say(self, text: str) -> None:
            said.append(text)

    def guide_for(path: Path, backend: str, guide: str = "wire") -> object:
        base, gen = generator_of(path)
        spec = ExploreSpec(path, tmp_path, SearchSpec(schedules=1), backend=backend, guide=guide)
        return _guide(spec, base, gen, Say())  # type: ignore[arg-type]

    assert isinstance(guide_for(FILES[0], "netns"), Guide) and isinstance(guide_for(FILES[1], "netns"), Guide)
    assert guide_for(FILES[0], "netns", "random") is None and said == []
    assert guide_for(FILES[0], "docker") is None
    assert said == ["guide: random (the docker backend has no wire tap; the wire tap watches netns clusters)"]


def test_a_near_miss_is_kept_when_it_comes_nearer_than_any_before_it() -> None:
    _, gen = generator_of(FILES[0])
    guide = Guide(gen)
    faults = gen.draw(random.Random(1))
    guide.record(faults, Coverage(frozenset({"a"})), pressure=0.1)
    assert guide.record(faults, Coverage(frozenset({"a"})), pressure=0.2) == 0 and len(guide.corpus) == 1  # < floor
    guide.record(faults, Coverage(frozenset({"a"})), "shift of #1", pressure=0.6)
    guide.record(faults, Coverage(frozenset({"a"})), pressure=0.5)  # not nearer than 0.6
    guide.record(faults, Coverage(frozenset({"a"})), pressure=1.4)  # failed: no near miss, and not the best
    assert [e.pressure for e in guide.corpus] == [0.1, 0.6] and guide.near_misses == 1 and guide.best == 0.6
    assert dict(guide.origins) == {"random": 1, "shift": 1}
    plain = Guide(gen, near=False)
    plain.record(faults, Coverage(frozenset({"a"})), pressure=0.1)
    plain.record(faults, Coverage(frozenset({"a"})), pressure=0.6)
    assert len(plain.corpus) == 1 and plain.near_misses == 0


def test_mutations_start_from_the_nearest_miss_most_often() -> None:
    _, gen = generator_of(FILES[0])
    rng = random.Random(7)
    guide = Guide(gen, mutate=1.0)
    drawn = [gen.draw(rng) for _ in range(3)]
    for i, (faults, pressure) in enumerate(zip(drawn, (0.0, 0.3, 0.9), strict=True)):
        guide.record(faults, Coverage(frozenset({f"f{i}"})), pressure=pressure)
    origins = [guide.next_faults(rng)[1] for _ in range(300)]
    picked = [int(o.rsplit("#", 1)[1]) for o in origins if "#" in o]  # "random": no operator applied to the pick
    assert len(picked) > 200, origins
    share = [picked.count(n) / len(picked) for n in (1, 2, 3)]
    assert share[2] > 0.45 and share[2] > 2 * share[1], share  # half the picks by pressure, nearly all of them #3
    plain = Guide(gen, mutate=1.0, near=False)  # features alone: the entries' pressures play no part
    for i, (faults, pressure) in enumerate(zip(drawn, (0.0, 0.3, 0.9), strict=True)):
        plain.record(faults, Coverage(frozenset({f"f{i}"})), pressure=pressure)
    origins = [plain.next_faults(rng)[1] for _ in range(300)]
    picked = [int(o.rsplit("#", 1)[1]) for o in origins if "#" in o]
    assert picked.count(3) / len(picked) < 0.45, picked.count(3) / len(picked)  # about a third each


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_a_tail_mutation_cuts_the_link_over_the_end_of_a_burst(path: Path) -> None:
    """The cut (a one-way partition or a discard of that type) starts before the burst's last bin and ends after it,
    from the burst's sender to its receiver (one member for a multicast), the larger burst far likelier; it comes
    alone (no network fault of the entry left), in place of one of them, or beside them; the scenario stays valid."""
    base, gen = generator_of(path)
    w0, w1 = gen.window()
    t = round(w0 + 0.4 * (w1 - w0), 3)
    kinds, small, alone = set(), 0, 0
    for seed in range(60):
        rng = random.Random(seed)
        parent = gen.draw(rng)
        key = "UNICAST3.DATA" if seed % 2 else "NAKACK2.MSG"
        entry = Entry(
            parent, frozenset(), (), tails=(("A", "B" if seed % 2 else "*", key, t, 50), ("B", "A", "X.Y", t, 1))
        )
        child = mutate(gen, rng, entry, "tail")
        assert child is not None
        scenario_of(with_faults(base, child, seed))
        added = [f for f in child if f not in parent]
        assert len(added) == 1, added
        (cut,) = added
        alone += [f for f in child if f.get("kind") in NETWORK] == [cut]
        if cut["from"] == ["B"]:
            small += 1
            continue
        kinds.add(cut["kind"])
        at, d = float(cut["at"][:-1]), float(cut["for"][:-1])
        assert at < t and at + d > t + 0.1 and cut["from"] == ["A"]
        assert cut["to"] == ["B"] if seed % 2 else len(cut["to"]) == 1 and cut["to"] != ["A"]
        if cut["kind"] == "partition":
            assert cut["one_way"] is True
        else:
            assert cut["kind"] == "discard" and cut["match"] == f"{key}()"
    assert kinds == {"partition", "discard"} and small <= 6 and 15 <= alone <= 50, (small, alone)


def test_an_entry_with_tails_is_mutated_by_a_tail_about_half_the_time() -> None:
    _, gen = generator_of(FILES[0])
    w0, w1 = gen.window()
    guide = Guide(gen, mutate=1.0)
    cov = Coverage(frozenset({"x"}), tails=(("A", "B", "UNICAST3.DATA", (w0 + w1) / 2, 30),))
    guide.record(gen.draw(random.Random(3)), cov)
    assert guide.corpus[0].tails == cov.tails
    origins = [guide.next_faults(random.Random(seed))[1] for seed in range(100)]
    tails = sum(o == "tail of #1" for o in origins)
    assert 35 <= tails <= 70, origins
