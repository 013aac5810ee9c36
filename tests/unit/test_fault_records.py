"""Typed fault records (chaos/faults.py) and their JSON edges: chaos.json's records, faults.jsonl's fields, and the
read-only mapping that keeps `record["id"]` working for users' tests."""

from __future__ import annotations

import pytest

from chaos.faults import Fault, FaultRecord, FaultWindow, TimedFault
from chaos.normalize import normalize

NAMES = ["A", "B", "C"]
ARGS = {
    "partition": {"from": "A", "to": ["B"], "one_way": True},
    "split": {"groups": [["A"], ["B", "C"]]},
    "loss": {"from": "*", "to": "B", "probability": 0.2},
    "delay": {"from": "A", "to": "B", "delay": "30ms"},
    "reorder": {"from": "A", "to": "B", "probability": 0.1},
    "duplicate": {"from": "A", "to": "B", "probability": 0.1},
    "discard": {"match": "UNICAST3.ACK(seqno=5)", "from": "B", "to": "A", "action": "delay", "delay": 0.05},
}


@pytest.mark.parametrize("kind", list(ARGS))
def test_a_record_survives_chaos_json(kind: str) -> None:
    record = FaultRecord("f3", normalize(kind, ARGS[kind], NAMES), seed=7, window=FaultWindow(10, None))
    assert FaultRecord.from_json(record.to_json()) == record
    handled = record.with_handled({"dropped": 2})
    assert FaultRecord.from_json(handled.to_json()) == handled


def test_the_json_forms_keep_their_keys_and_order() -> None:
    record = FaultRecord("f1", normalize("discard", ARGS["discard"], NAMES), seed=7, since=1.5)
    assert list(record.to_json()) == [
        *("id", "kind", "from", "to", "match", "action", "count", "delay", "seed", "since"),
    ]
    assert record.fault.event_fields() == {
        "from": ["B"],
        "to": ["A"],
        "match": "UNICAST3.ACK(seqno=5)",
        "action": "delay",
        "delay": "50ms",
    }
    delay = normalize("delay", ARGS["delay"], NAMES)
    assert delay.event_fields() == {"from": ["A"], "to": ["B"], "delay": "30ms", "jitter": "0ms"}
    assert Fault.from_event({"kind": "delay", **delay.event_fields()}) == delay


def test_a_record_reads_like_the_dict_it_was() -> None:
    record = FaultRecord("f2", normalize("loss", ARGS["loss"], NAMES), seed=1)
    assert record["id"] == "f2" and record["probability"] == 0.2 and record.get("handled") is None
    assert "from" in record and dict(record) == record.to_json()
    with pytest.raises(KeyError):
        record["nope"]


def test_links_and_windows() -> None:
    split = normalize("split", ARGS["split"], NAMES)
    assert sorted(split.links()) == [("A", "B"), ("A", "C"), ("B", "A"), ("C", "A")]
    both = normalize("partition", {"from": "A", "to": "B"}, NAMES)
    assert both.links() == [("A", "B"), ("B", "A")] and both.cuts
    planned = TimedFault("f1", both, 3, 1.5, None).record(1_000)
    assert planned.window == FaultWindow(1_500_001_000, None) and planned.seed == 3
