"""orchestration/explore/rediscover_real.py, the real-member rediscovery of bench_explore, driven here through a
simulator pool (the same search, judged shrink and confirmation, in seconds): a catalogue bug is found, shrunk with
each candidate's control run beside it, confirmed on every run and its control passes; a schedule whose control fails
too is searched past; the variants a real pair sets (a release) are what the control runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration.explore.case import CaseResult
from orchestration.explore.pool import make_pool
from orchestration.explore.rediscover_real import CONTROL_FAILED, RealSpec, _Judged, rediscover_real, variant_pair
from orchestration.explore.tables import TomlTable
from orchestration.matrix.bugs import catalogue, find

pytestmark = pytest.mark.sim


def test_a_catalogue_bug_is_found_shrunk_and_confirmed_with_its_control(tmp_path: Path) -> None:
    (entry,) = find(catalogue(), "nakack2-last-message-lost")
    pool = make_pool(1)
    try:
        r = rediscover_real(entry, pool, RealSpec(budget=120, shrink_runs=12, confirm_runs=3), tmp_path)
    finally:
        pool.close()
    assert r.found is not None and r.shrunk is not None, f"not found in {r.tried} schedules"
    assert r.found.result.violated == ("delivered_within",)
    assert r.faults_after is not None and r.faults_after <= len(r.found.faults)
    assert r.confirm is not None and r.confirm["runs"] == 3 and r.confirm["reproduced"] == 3
    assert (r.control_passed, r.control_ran) == (3, 3) and r.ok
    minimal = (tmp_path / "rediscover-nakack2-last-message-lost" / "minimal.toml").read_text()
    assert "resend_last_seqno = false" in minimal, "the minimal scenario is the flawed variant"


def test_a_candidate_whose_control_fails_too_is_not_the_bug() -> None:
    (entry,) = find(catalogue(), "nakack2-last-message-lost")

    class Pool:
        backend = "sim"

        def map(self, raws: list[TomlTable]) -> list[CaseResult]:
            return [CaseResult(("delivered_within",)) for _ in raws]  # the flawed and the fixed variant both fail

    judged = _Judged(entry, Pool(), ("delivered_within",))  # type: ignore[arg-type]
    assert judged([{}])[0].violated == (CONTROL_FAILED,)
    assert judged.control_passes({}) is False and judged.cluster_runs == 3


def test_a_schedule_whose_control_fails_as_found_is_shrunk_to_one_whose_control_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real timing: the fixed variant fails every schedule with a fault (the flawed one fails them all)."""
    import orchestration.explore.pool as pool_module

    def run_job(raw: TomlTable, *args: object, **kwargs: object) -> CaseResult:
        props = raw["cluster"].get("properties", {})  # type: ignore[union-attr]
        flawed = props.get("nakack2", {}).get("resend_last_seqno") is False
        faults = len(raw.get("faults", []))  # type: ignore[arg-type]
        return CaseResult(("delivered_within",) if flawed or faults else ())

    monkeypatch.setattr(pool_module, "run_job", run_job)
    (entry,) = find(catalogue(), "nakack2-last-message-lost")
    pool = make_pool(1)
    try:
        r = rediscover_real(entry, pool, RealSpec(budget=60, shrink_runs=40, confirm_runs=2), tmp_path)
    finally:
        pool.close()
    assert r.found is not None and r.shrunk is not None and r.shared == 1, "the first schedule's control fails"
    assert r.found.index == 0 and r.faults_after == 0, r.shrunk.trail
    assert (r.control_passed, r.control_ran) == (3, 3) and r.ok


def test_the_variants_a_real_search_runs() -> None:
    by_name = {e.path.stem: e for e in catalogue()}
    assert variant_pair(by_name["unicast2-last-message"]) == ("flawed", "fixed")
    assert variant_pair(by_name["jgroups-nakack-last-message"]) == ("flawed", None), "no fix: no control"
    assert variant_pair(by_name["jgroups-unicast2-last-message"]) == ("flawed", "fixed")
    real_only = next(e for e in catalogue() if not e.bug.model_variants)
    assert variant_pair(real_only) == ("real-flawed", "real-fixed")


def test_the_search_runs_on_warm_clusters_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RealSpec.warm reaches the search (bench_explore --warm K); a search that finds nothing ends the rediscovery,
    with the failures it left aside (other checks) counted."""
    import orchestration.explore.rediscover_real as module
    from orchestration.explore.search import SearchResult

    asked: list[int] = []

    def search(*args: object, warm: int = 0, **kwargs: object) -> SearchResult:
        asked.append(warm)
        return SearchResult(tried=3, seconds=1.0, other=2)

    monkeypatch.setattr(module, "search", search)
    (entry,) = find(catalogue(), "nakack2-last-message-lost")
    pool = make_pool(1)
    try:
        r = rediscover_real(entry, pool, RealSpec(budget=60, warm=20), tmp_path)
    finally:
        pool.close()
    assert asked == [20] and r.found is None and r.tried == 3 and r.other == 2, "failures with other checks counted"


def test_a_flaky_minimal_scenario_is_rediscovered_in_an_earlier_confirmed_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real timing: the flawed variant fails every run with two faults or more, one run in four with one; the fixed
    variant passes. The one-fault minimal scenario is flaky; the form before the last step (two faults) is confirmed,
    written to reliable.toml, and its control is what runs."""
    import orchestration.explore.pool as pool_module
    from orchestration.explore.case import load_base, with_faults
    from orchestration.explore.real_shrink import RateShrunk
    from orchestration.explore.rediscover_real import RealRediscovery, _confirm
    from orchestration.explore.search import Found
    from orchestration.explore.tables import faults_of

    flawed_runs, control_faults = [0], []

    def run_job(raw: TomlTable, *args: object, **kwargs: object) -> CaseResult:
        props = raw["cluster"].get("properties", {})  # type: ignore[union-attr]
        faults = len(raw.get("faults", []))  # type: ignore[arg-type]
        if props.get("nakack2", {}).get("resend_last_seqno") is not False:
            control_faults.append(faults)
            return CaseResult(())
        flawed_runs[0] += 1
        return CaseResult(("delivered_within",) if faults >= 2 or flawed_runs[0] % 4 == 0 else ())

    monkeypatch.setattr(pool_module, "run_job", run_job)
    (entry,) = find(catalogue(), "nakack2-last-message-lost")
    base = load_base(entry.path)
    kills = [{"at": f"{0.5 + k}s", "kind": "kill", "member": "C"} for k in range(3)]
    f3, f2, f1 = (with_faults(base, kills[:n], 7) for n in (3, 2, 1))
    found = Found(0, 7, kills, f3, CaseResult(("delivered_within",)), 1.0, 1)
    out = RealRediscovery(entry, "flawed", "fixed", found=found)
    out.shrunk = RateShrunk(f1, ("delivered_within",), trail=["remove fault 3", "remove fault 2"], path=[f3, f2])
    pool = make_pool(1)
    try:
        _confirm(out, _Judged(entry, pool, ("delivered_within",)), pool, RealSpec(confirm_runs=4), tmp_path)
    finally:
        pool.close()
    assert out.confirm is not None and not out.confirm["confirmed"], "one run in four: flaky"
    assert out.reliable is not None and out.reliable.steps_back == 1 and len(faults_of(out.reliable.raw)) == 2
    assert out.confirm["reliable"]["file"] == "reliable.toml" and out.confirm["reliable"]["tried"][0]["reproduced"] == 4
    reliable = tmp_path / "rediscover-nakack2-last-message-lost" / "reliable.toml"
    assert "resend_last_seqno = false" in reliable.read_text(), "the reliable form is the flawed variant"
    assert control_faults == [2, 2, 2], "the control runs the reliable form"
    assert out.ok
