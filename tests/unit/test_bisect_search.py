"""bisect's search over a synthetic oracle: each release fails with a fixed probability (a seeded random number per
run), so the search is tested without running anything: it finds a sharp boundary by probing few releases, gives a
flaky release more runs and never calls a rate of 0.3 "passing", says when the boundary is not sharp, and says when
both ends give the same outcome."""

from __future__ import annotations

import random

import pytest

from orchestration.bisect.search import Search

VERSIONS = [f"5.4.{i}" for i in range(13)]


def oracle_of(rates: dict[str, float], seed: int = 1):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    calls: list[str] = []

    def oracle(version: str, runs: int) -> tuple[int, int, str]:
        calls.append(version)
        failed = sum(rng.random() < rates[version] for _ in range(runs))
        return failed, runs, f"probes/{version}"

    return oracle, calls


def test_a_sharp_fix_is_found_by_binary_search_not_a_scan() -> None:
    rates = {v: 1.0 if i < 7 else 0.0 for i, v in enumerate(VERSIONS)}  # fixed in 5.4.7
    oracle, calls = oracle_of(rates)
    s = Search(VERSIONS, runs=5)
    s.run(oracle)
    before, after = s.boundary or (None, None)
    assert before is not None and after is not None
    assert (before.version, after.version) == ("5.4.6", "5.4.7")
    assert s.sharp and (before.rate, after.rate) == (1.0, 0.0)
    assert len(set(calls)) <= 2 + 4  # both ends and log2(13) halvings, not 13 probes
    assert s.summary() == "5.4.6: 5/5 fail; 5.4.7: 0/5 fail: fixed in 5.4.7"


def test_a_regression_is_named_broken() -> None:
    rates = {v: 0.0 if i < 3 else 1.0 for i, v in enumerate(VERSIONS)}
    s = Search(VERSIONS, runs=2)
    s.run(oracle_of(rates)[0])
    assert s.summary().endswith("broken in 5.4.3") and s.sharp


def evenly_flaky(rates: dict[str, float]):  # type: ignore[no-untyped-def]
    """An oracle whose release fails exactly `rate` of its runs as they accumulate (run k fails when
    floor((k+1) * rate) > floor(k * rate)): a rate of 0.3 fails 1 of the first 5 runs and 4 of the first 15. (A
    random 0.3 passes 5 runs in a row 17% of the time: no probe of 5 can tell that from a pass; docs/bisect.md.)"""
    done: dict[str, int] = {}

    def oracle(version: str, runs: int) -> tuple[int, int, str]:
        k0 = done.get(version, 0)
        done[version] = k0 + runs
        rate = rates[version]
        failed = sum(int((k + 1) * rate) > int(k * rate) for k in range(k0, k0 + runs))
        return failed, runs, f"probes/{version}"

    return oracle


def test_a_rate_of_0_3_is_not_passing() -> None:
    """5.4.0-5.4.5 always fail, 5.4.6 fails 30% of its runs, later ones never: the boundary is where the outcome
    first differs from 5.4.0's, 5.4.5 -> 5.4.6 (the flaky release is not called fixed), and it is not sharp;
    the flaky release got more runs than a clean one."""
    rates = {v: 1.0 if i < 6 else 0.3 if i == 6 else 0.0 for i, v in enumerate(VERSIONS)}
    s = Search(VERSIONS, runs=5)
    s.run(evenly_flaky(rates))
    before, after = s.boundary or (None, None)
    assert before is not None and after is not None
    assert (before.version, after.version) == ("5.4.5", "5.4.6"), s.summary()
    assert after.outcome == "flaky" and (after.failed, after.runs) == (4, 15)
    assert not s.sharp and "not sharp" in s.summary()
    assert all(p.runs == 5 for p in s.probes.values() if p.outcome != "flaky")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_flakiness_between_two_sharp_ends_is_reported_with_its_rates(seed: int) -> None:
    """A seeded random 0.5 in the middle: whatever the probes saw, the summary quotes the rates on both sides."""
    rates = {v: 1.0 if i < 4 else 0.5 if i < 9 else 0.0 for i, v in enumerate(VERSIONS)}
    s = Search(VERSIONS, runs=5)
    s.run(oracle_of(rates, seed)[0])
    before, after = s.boundary or (None, None)
    assert before is not None and after is not None and before.outcome == "fail" and after.outcome != "fail"
    assert f"{before.failed}/{before.runs}" in s.summary() and f"{after.failed}/{after.runs}" in s.summary()
    assert s.sharp == (after.outcome == "pass")


def test_a_flaky_release_whose_extra_runs_all_pass_is_still_flaky() -> None:
    """One failure in five, then ten clean runs: 1/15 is a rate, not a pass."""
    script = iter([(1, 5), (0, 5), (0, 5)])
    s = Search(["1.0.0", "1.0.1"], runs=5)
    p = s.measure("1.0.0", lambda v, n: (*next(script), "d"))
    assert (p.failed, p.runs, p.outcome) == (1, 15, "flaky")


def test_the_same_outcome_at_both_ends_is_no_boundary() -> None:
    rates = {v: 0.0 for v in VERSIONS}
    oracle, calls = oracle_of(rates)
    s = Search(VERSIONS, runs=3)
    s.run(oracle)
    assert s.boundary is None and s.same and calls == ["5.4.0", "5.4.12"]
    assert "no boundary" in s.summary()


def test_an_interrupted_search_keeps_its_probes() -> None:
    rates = {v: 1.0 if i < 7 else 0.0 for i, v in enumerate(VERSIONS)}
    oracle, calls = oracle_of(rates)

    def interrupting(version: str, runs: int) -> tuple[int, int, str]:
        if len(calls) == 3:
            raise KeyboardInterrupt
        return oracle(version, runs)

    s = Search(VERSIONS, runs=5)
    with pytest.raises(KeyboardInterrupt):
        s.run(interrupting)
    assert [v for v in s.order if s.probes[v].runs] == ["5.4.0", "5.4.12", "5.4.6"]
    assert s.boundary is None and "did not finish" in s.summary()
    assert (VERSIONS[s.lo], VERSIONS[s.hi]) == ("5.4.6", "5.4.12")
