"""The one faults.jsonl writer (orchestration/fault_log.py): every kind of line, byte for byte as docs/history.md
describes them (and as the four writers wrote them before they shared it)."""

from __future__ import annotations

from pathlib import Path

from chaos.faults import FaultRecord
from chaos.normalize import normalize
from orchestration.fault_log import FaultLog

NAMES = ["A", "B", "C"]


def test_every_line_byte_for_byte(tmp_path: Path) -> None:
    seen: list[dict] = []
    log = FaultLog(tmp_path / "faults.jsonl", on_event=seen.append)
    log.start(t=5, seed=3, backend="netns")
    discard = normalize("discard", {"match": "UNICAST3.ACK()", "from": "B", "to": "A", "count": 2}, NAMES)
    log.fault(FaultRecord("f1", discard, 3), t=10, at=1.5)
    delay = normalize("delay", {"from": "A", "to": "*", "delay": 0.03}, NAMES)
    log.fault(FaultRecord("f2", delay, 3), t=11, duration=2.0, at=1.5)
    log.heal(["f2"], t=12, seed=3, at=3.5)
    log.heal(None, t=13, seed=3)
    log.action("kill", {"member": "C"}, t=14, seed=3, at=4.0)
    log.action(
        "set", {"member": "B", "property": "unicast3.xmit_interval", "value": "100ms"}, t=15, seed=3, lag_ms=21.04
    )
    expected = (
        '{"event":"start","t":5,"seed":3,"backend":"netns"}\n'
        '{"t":10,"event":"fault","seed":3,"kind":"discard","id":"f1","from":["B"],"to":["A"],'
        '"match":"UNICAST3.ACK()","action":"drop","count":2,"at":"1.5s"}\n'
        '{"t":11,"event":"fault","seed":3,"kind":"delay","id":"f2","from":["A"],"to":["A","B","C"],'
        '"delay":"30ms","jitter":"0ms","for":"2s","at":"1.5s"}\n'
        '{"t":12,"event":"fault","seed":3,"kind":"heal","faults":["f2"],"at":"3.5s"}\n'
        '{"t":13,"event":"fault","seed":3,"kind":"heal"}\n'
        '{"t":14,"event":"fault","seed":3,"kind":"kill","member":"C","at":"4s"}\n'
        '{"t":15,"event":"fault","seed":3,"kind":"set","member":"B","property":"unicast3.xmit_interval",'
        '"value":"100ms","late":true,"lag_ms":21.0}\n'
    )
    assert (tmp_path / "faults.jsonl").read_text() == expected
    assert seen == log.events and len(seen) == 7
    memory = FaultLog(None)  # the simulator's: kept, then saved
    memory.events.extend(log.events)
    memory.save(tmp_path / "saved.jsonl")
    assert (tmp_path / "saved.jsonl").read_text() == expected


def test_observed_onsets_extend_the_fault_lines_and_nothing_else(tmp_path: Path) -> None:
    log = FaultLog(tmp_path / "faults.jsonl")
    log.start(t=5, seed=3, backend="netns")
    loss = normalize("loss", {"from": "A", "to": "B", "probability": 1.0}, NAMES)
    log.fault(FaultRecord("f1", loss, 3), t=10, duration=0.3, at=1.0)
    log.fault(FaultRecord("f2", loss, 3), t=20, at=2.0)
    log.heal(["f1"], t=30, seed=3, at=1.3)
    before = (tmp_path / "faults.jsonl").read_text().splitlines()
    log.observed({"f1": 11})
    after = (tmp_path / "faults.jsonl").read_text().splitlines()
    assert after[1] == before[1][:-1] + ',"observed_t":11}'
    assert [after[0], *after[2:]] == [before[0], *before[2:]]  # f2 (not observed) and the heal are untouched
    assert log.events[1]["observed_t"] == 11
