"""The pytest plugin's recording cluster on the simulator: its fault table records faults and heals in faults.jsonl
and delegates everything else to the cluster's own table, explicitly (orchestration/pytest_plugin/recording.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.faults import TimedFault
from orchestration.cluster import ClusterSpec
from orchestration.pytest_plugin.recording import RecordingFaultTable, recording_class
from orchestration.sim.cluster import SimCluster
from orchestration.sim.faults import SimFaultTable

pytestmark = pytest.mark.sim


def test_the_recording_table_records_and_delegates(tmp_path: Path) -> None:
    cluster = recording_class(SimCluster)(ClusterSpec(["A", "B", "C"], backend="sim", seed=5), workdir=tmp_path)
    cluster.start()
    cluster.record_start()
    chaos = cluster.chaos
    assert isinstance(chaos, RecordingFaultTable) and isinstance(chaos.inner, SimFaultTable)
    assert chaos.plan_ahead is False and chaos.clock_offset() is None and chaos.queue_bypass() == {}
    loss = chaos.add("loss", {"from": "A", "to": "B", "probability": 0.5})
    assert loss.seed == 5 and loss.id == "f1"
    cluster.sleep(0.1)
    chaos.remove([loss.id])
    plan = TimedFault("f9", chaos.normalize("partition", {"from": "A", "to": "C"}), 5, 0.5, 1.0)
    chaos.plan([plan], cluster.clock.now_ns())
    assert [f.id for f in chaos.faults(stats=False)] == ["f9"]
    chaos.heal()
    cluster.down()
    lines = [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert [(e["event"], e.get("kind"), e.get("id"), e.get("faults")) for e in lines] == [
        ("start", None, None, None),
        ("fault", "loss", "f1", None),
        ("fault", "heal", None, ["f1"]),
        ("fault", "heal", None, None),  # the plan is the scheduler's to log, not the table's
    ]
    assert lines[1]["t"] < lines[2]["t"] == lines[1]["t"] + 100_000_000
