"""What the chaos engine asks of each receiving namespace, rendered without a kernel (chaos/engine.py, kernel.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos import kernel
from chaos.engine import Chaos, ChaosError, Endpoint
from chaos.rules import parse_match

IPS = {"A": "10.0.0.10", "B": "10.0.0.11", "C": "10.0.0.12"}


@pytest.fixture
def chaos(tmp_path: Path) -> Chaos:
    return Chaos(tmp_path, "cbtest00", {n: Endpoint(n, ip, f"cbtest00-{n}") for n, ip in IPS.items()})


def fault(chaos: Chaos, kind: str, i: int = 1, **args: object) -> dict:
    return {"id": f"f{i}", **chaos.normalize(kind, args), "seed": 3}


def test_one_way_partition_blocks_at_the_receiver_only(chaos: Chaos) -> None:
    out = chaos.render([fault(chaos, "partition", **{"from": ["A"], "to": ["B"], "one_way": True})], use_netem=False)
    assert out["B"][0].blocked == {IPS["A"]}
    assert out["A"][0].empty() and out["C"][0].empty()


def test_split_blocks_every_cross_link(chaos: Chaos) -> None:
    out = chaos.render([fault(chaos, "split", groups=[["A"], ["B", "C"]])], use_netem=False)
    assert out["A"][0].blocked == {IPS["B"], IPS["C"]}
    assert out["B"][0].blocked == out["C"][0].blocked == {IPS["A"]}


def test_delay_uses_netem_where_present_and_the_handler_elsewhere(chaos: Chaos) -> None:
    f = fault(chaos, "delay", **{"from": ["A"], "to": ["B"], "delay": "50ms", "jitter": "5ms"})
    rules, shapings, handler_rules, _ = chaos.render([f], use_netem=True)["B"]
    assert rules.empty() and handler_rules == []
    assert shapings[0].netem_args() == ["delay", "50ms", "5ms"]
    rules, shapings, handler_rules, max_delay = chaos.render([f], use_netem=False)["B"]
    assert shapings == [] and rules.queue_all == {IPS["A"]} and max_delay == pytest.approx(55.0)
    assert handler_rules[0]["action"] == "delay" and handler_rules[0]["delay_ms"] == pytest.approx(50.0)


def test_stateless_discard_goes_to_the_kernel_and_batches_to_the_handler(chaos: Chaos) -> None:
    f = fault(chaos, "discard", match="UNICAST3.ACK(seqno=50)", **{"from": "B", "to": "A"})
    rules, _, handler_rules, _ = chaos.render([f], use_netem=False)["A"]
    assert [d.source for d in rules.header_drops] == [IPS["B"]]
    assert rules.queue_batches == {IPS["B"]} and not rules.queue_ours
    assert handler_rules[0]["id"] == "f1:B" and handler_rules[0]["match"] == "UNICAST3.ACK(seqno=50)"


def test_counted_discard_goes_to_the_handler_whole(chaos: Chaos) -> None:
    f = fault(chaos, "discard", match="UNICAST3.ACK(seqno=50)", count=1, **{"from": "B", "to": "A"})
    rules, _, handler_rules, _ = chaos.render([f], use_netem=False)["A"]
    assert not rules.header_drops and rules.queue_ours == {IPS["B"]}
    assert handler_rules[0]["count"] == 1


def test_rule_seeds_follow_the_run_seed_and_differ_per_link(chaos: Chaos) -> None:
    f = fault(chaos, "duplicate", probability=0.1)
    f2 = fault(chaos, "reorder", 2, probability=0.1)
    seeds = [r["seed"] for rs in chaos.render([f, f2], use_netem=False).values() for r in rs[2]]
    assert len(seeds) == 12 and len(set(seeds)) == 12
    assert seeds == [r["seed"] for rs in chaos.render([f, f2], use_netem=False).values() for r in rs[2]]


def test_u32_expression_walks_the_strings_and_checks_the_fields() -> None:
    u32 = kernel.u32_single_message(parse_match("UNICAST3.ACK(seqno=50)"))
    assert u32 is not None
    tests = u32.split("&&")
    assert tests[:2] == ["0>>24=0x45", "28>>16=0xcb01"]
    assert tests[2] == "31>>24@32>>24@33>>24@34>>16=1"  # exactly one message
    assert tests[3] == "31>>24@32>>24@33>>24@36>>16=0x0101"  # UNICAST3 (1), ACK (1)
    assert tests[4:] == ["31>>24@32>>24@33>>24@38=0", "31>>24@32>>24@33>>24@42=50"]  # u64 seqno: high, low word
    ranged = kernel.u32_single_message(parse_match("UNICAST3.DATA(seqno=10..20, first=1)"))
    # `first` sits after seqno (8 bytes) and conn_id (4): message offset 14, packet offset 50
    assert ranged is not None and ranged.endswith("42=10:20&&31>>24@32>>24@33>>24@50>>24=1")


def test_u32_gives_up_where_the_handler_must_decide() -> None:
    assert kernel.u32_single_message(parse_match("UNICAST3.DATA(seqno=1..5000000000)")) is None


def test_bad_faults_name_the_problem(chaos: Chaos) -> None:
    with pytest.raises(ChaosError, match="unknown network fault 'kill'"):
        chaos.normalize("kill", {})
    with pytest.raises(ChaosError, match="action delay needs a delay"):
        chaos.normalize("discard", {"match": "UNICAST3.ACK()", "action": "delay"})
    with pytest.raises(ChaosError, match="count must be a whole number"):
        chaos.normalize("discard", {"match": "UNICAST3.ACK()", "count": 0})


def test_discard_is_refused_over_tcp(tmp_path: Path) -> None:
    tcp = Chaos(tmp_path, "cbtest00", {"A": Endpoint("A", IPS["A"], "x")}, transport="tcp")
    with pytest.raises(ChaosError, match="transport tcp"):
        tcp.normalize("discard", {"match": "UNICAST3.ACK()"})


def test_describe_reads_the_fault_table_and_faults_jsonl_alike(chaos: Chaos) -> None:
    from chaos.engine import fault_event
    from orchestration.cli_fault import describe

    record = fault(chaos, "delay", **{"from": ["C"], "to": ["A"], "delay": "30ms", "jitter": "5ms"})
    assert describe(record) == describe(fault_event(record)) == "delay 30ms ± 5ms C -> A"
    assert describe({"kind": "heal", "faults": ["f3"]}) == "heal f3"
