"""Over TCP (system jgroups-5-tcp, real 5.5.6 members on netns) a discard is refused when the scenario is read
(tests/unit/test_systems.py), and every other fault works: a scenario with a delay, a partition, a pause, a kill and
restart and a graceful leave runs and passes its checks; the partition held C's copies of B's multicasts back until
the heal (they came late, none lost), the delay slowed A's unicasts to B."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median
from typing import Any

import pytest
from click.testing import CliRunner

from orchestration.cli.main import main
from orchestration.systems import SYSTEMS
from orchestration.systems.jgroups5 import missing
from tests.clusters import netns_skip_reason

MISSING = netns_skip_reason() or missing(SYSTEMS["jgroups-5-tcp"])
pytestmark = [
    pytest.mark.netns,
    pytest.mark.jgroups,
    pytest.mark.slow,
    pytest.mark.skipif(MISSING is not None, reason=str(MISSING)),
]

SCENARIO = """
name = "jgroups5-tcp-faults"
seed = 1
timeout = "90s"

[cluster]
system = "jgroups-5-tcp"
members = ["A", "B", "C"]

[[workload]]
kind = "unicast"
from = "A"
to = "B"
count = 300
rate = 40

[[workload]]
kind = "multicast"
from = "B"
count = 300
rate = 40

[[faults]]
at = "1s"
kind = "delay"
from = "A"
to = "B"
delay = "200ms"
for = "1s"

[[faults]]
at = "3s"
kind = "partition"
from = ["B"]
to = ["C"]
for = "1.5s"

[[faults]]
at = "5.5s"
kind = "pause"
member = "C"

[[faults]]
at = "6s"
kind = "resume"
member = "C"

[[faults]]
at = "6.5s"
kind = "kill"
member = "C"

[[faults]]
at = "7s"
kind = "restart"
member = "C"

[[faults]]
at = "9.5s"
kind = "leave"
member = "C"
"""


def history(run: Path, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "history" / f"{name}.jsonl").read_text().splitlines() if line]


def test_partition_delay_pause_kill_restart_and_leave_work_over_tcp(tmp_path: Path) -> None:
    path = tmp_path / "tcp.toml"
    path.write_text(SCENARIO)
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", str(path), "--out", str(out)], terminal_width=200)
    assert result.exit_code == 0 and "verdict: PASS" in result.output, result.output
    faults = [json.loads(line) for line in (out / "faults.jsonl").read_text().splitlines()]
    kinds = [f["kind"] for f in faults if f["event"] == "fault"]
    assert [k for k in kinds if k != "heal"] == ["delay", "partition", "pause", "resume", "kill", "restart", "leave"]
    t0 = next(f["t"] for f in faults if f["event"] == "start")
    # medians, against the same member's before the faults: a send's history line comes a little before its bytes
    # leave, so a message logged at a window's edge may leave after it (this VM is shared and busy)
    sent = {e["msg_id"]: e["t"] for e in history(out, "B") if e["event"] == "send"}
    at_c = {e["msg_id"]: e["t"] for e in history(out, "C") if e["event"] == "deliver" and e["msg_id"] in sent}
    held = [m for m, t in sent.items() if t0 + 3.1e9 < t < t0 + 4.3e9]  # sent while C did not hear B
    assert held and all(m in at_c for m in held), "a multicast sent during the partition never reached C"
    before = [at_c[m] - t for m, t in sent.items() if t0 + 0.2e9 < t < t0 + 0.9e9 and m in at_c]
    assert median(before) < 0.1e9 < 0.3e9 < median(at_c[m] - sent[m] for m in held), "C got B's during the partition"
    at_b = {e["msg_id"]: e["t"] for e in history(out, "B") if e["event"] == "deliver"}
    sends = [e for e in history(out, "A") if e["event"] == "send"]
    slow = [at_b[e["msg_id"]] - e["t"] for e in sends if t0 + 1.1e9 < e["t"] < t0 + 1.9e9]
    fast = [at_b[e["msg_id"]] - e["t"] for e in sends if t0 + 0.2e9 < e["t"] < t0 + 0.9e9]
    assert median(fast) < 0.1e9 < 0.15e9 < median(slow), "the delay did not slow A's unicasts"
    c = [e["event"] for e in history(out, "C")]
    assert c.count("start") == 2 and "left" in c, c
