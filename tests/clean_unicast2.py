"""A healthy UNICAST2 run with default properties, as a new user writes it: two members, five unicasts, no fault.
Every message arrives within milliseconds, but UNICAST2 purges only on its STABLE round (stable_interval: 60 s by
default), so a run that waited for "nothing unacknowledged" timed out. Shared by the backend tests (tests/process,
tests/sim, tests/docker)."""

from __future__ import annotations

import json
from pathlib import Path

from analysis.reference import check_path
from orchestration.runner import run
from orchestration.scenario import parse

STACKS = ["unicast2", "unicast2+nakack2"]


def clean_unicast2(stack: str) -> dict[str, object]:
    return {
        "name": f"clean-{stack.replace('+', '-')}",
        "timeout": "60s",
        "cluster": {"members": 2, "stack": stack},
        "workload": [{"kind": "unicast", "from": "A", "to": "B", "count": 5}],
    }


def assert_a_clean_unicast2_run_passes(stack: str, backend: str, out: Path) -> None:
    outcome = run(parse(clean_unicast2(stack)), backend, out)
    assert not outcome.timed_out and outcome.extra_violations == [], outcome
    (result,) = check_path(out).values()
    assert result.violations == [], [f"{v.check}: {v.detail}" for v in result.violations]
    # the run ended before UNICAST2's first STABLE round: A still counted its five messages as unacknowledged
    stop = json.loads((out / "history" / "A.jsonl").read_text().splitlines()[-1])
    assert stop["event"] == "stop", stop
    assert stop["counters"]["unicast2"]["unacked_msgs"] == 5, stop["counters"]
    assert stop["counters"]["unicast2"]["stables_received"] == 0, stop["counters"]
