"""The shrink under non-determinism (orchestration/explore/real_shrink.py) and the confirmation's rate
(confirm.confirm_doc), without root: a scenario whose runs fail in a fixed pattern stands for real members."""

from __future__ import annotations

from orchestration.explore.case import CaseResult
from orchestration.explore.confirm import confirm_doc, confirm_line
from orchestration.explore.real_shrink import RateShrunk, shrink_real
from orchestration.explore.tables import TomlTable

BASE: TomlTable = {
    "name": "s",
    "seed": 1,
    "timeout": "20s",
    "cluster": {"members": 2, "stack": "unicast3"},
    "workload": [{"kind": "unicast", "from": "A", "to": "B", "count": 20, "size": 100, "rate": 50}],
    "faults": [
        {"at": "0.1s", "kind": "partition", "from": ["A"], "to": ["B"], "for": "1s"},
        {"at": "0.5s", "kind": "loss", "from": ["A"], "to": ["B"], "probability": 0.2, "for": "1s"},
    ],
    "checks": {"fifo": True},
}


def every_second_run() -> tuple[list[int], object]:
    calls = [0]

    def evaluate(raws: list[TomlTable]) -> list[CaseResult]:
        out = []
        for _ in raws:
            calls[0] += 1
            out.append(CaseResult(("fifo",) if calls[0] % 2 == 0 else ()))
        return out

    return calls, evaluate


def test_a_candidate_failing_in_one_of_its_k_runs_is_kept_with_its_rate() -> None:
    calls, evaluate = every_second_run()
    shrunk = shrink_real(BASE, ("fifo",), evaluate, max_runs=20)  # type: ignore[arg-type]
    assert isinstance(shrunk, RateShrunk) and shrunk.trail
    assert shrunk.rates[0] == (1, 2) and shrunk.trail[0].endswith("[1/2]"), shrunk.trail
    assert shrunk.runs == calls[0] <= 20
    assert len(shrunk.rates) == len(shrunk.trail)


def test_k_grows_as_the_rate_falls_and_the_run_budget_holds() -> None:
    s = RateShrunk(BASE, ("fifo",), failed_runs=1, all_runs=1)
    assert s.k(5) == 2
    s.failed_runs, s.all_runs = 1, 4
    assert s.k(5) == 5 and s.k(3) == 3
    never = shrink_real(BASE, ("fifo",), lambda raws: [CaseResult(()) for _ in raws], max_runs=7, max_k=5)
    assert never.trail == [] and never.runs <= 7 and not never.complete


def test_the_confirmation_rate_says_confirmed_flaky_or_not_reproduced() -> None:
    ok = confirm_doc("netns", [["fifo"]] * 8 + [[]] * 2, ("fifo",), [], parity=False)
    assert ok["rate"] == 0.8 and ok["confirmed"] and confirm_line(ok) == "reproduced 8/10 on netns: confirmed"
    flaky = confirm_doc("netns", [["fifo"], [], None, []], ("fifo",), ["no root"], parity=False)
    assert flaky["rate"] == 0.25 and not flaky["confirmed"] and flaky["errors"] == ["no root"]
    assert confirm_line(flaky) == "reproduced 1/4 on netns: flaky (25%)"
    none = confirm_doc("netns", [[]] * 3, ("fifo",), [], parity=False)
    assert confirm_line(none) == "reproduced 0/3 on netns: not reproduced"
