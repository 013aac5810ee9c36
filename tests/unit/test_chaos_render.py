"""What the netns fault engine asks of each receiving namespace, rendered without a kernel (chaos/render.py,
kernel.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from chaos import kernel
from chaos.faults import ChaosError, FaultRecord
from chaos.netns_engine import NetnsFaultEngine
from chaos.render import Endpoint
from chaos.rules import parse_match

IPS = {"A": "10.0.0.10", "B": "10.0.0.11", "C": "10.0.0.12"}


@pytest.fixture
def chaos(tmp_path: Path) -> NetnsFaultEngine:
    return NetnsFaultEngine(tmp_path, "cbtest00", {n: Endpoint(n, ip, f"cbtest00-{n}") for n, ip in IPS.items()})


def fault(chaos: NetnsFaultEngine, kind: str, i: int = 1, **args: object) -> FaultRecord:
    return FaultRecord(f"f{i}", chaos.normalize(kind, args), seed=3)


def test_one_way_partition_blocks_at_the_receiver_only(chaos: NetnsFaultEngine) -> None:
    out = chaos.render([fault(chaos, "partition", **{"from": ["A"], "to": ["B"], "one_way": True})], use_netem=False)
    assert out["B"][0].blocked == {IPS["A"]}
    assert out["A"][0].empty() and out["C"][0].empty()


def test_a_system_without_a_wire_profile_gets_every_fault_but_discards(tmp_path: Path) -> None:
    """wire "none" (a foreign system with no profile, e.g. examples/naive_rb): partitions, loss and delay render as
    on chaosbed's wire; only a discard is refused, naming the profiles there are."""
    none = NetnsFaultEngine(tmp_path, "cbtest00", {n: Endpoint(n, ip, f"cbtest00-{n}") for n, ip in IPS.items()},
                            wire="none")  # fmt: skip
    ours = NetnsFaultEngine(tmp_path, "cbtest00", {n: Endpoint(n, ip, f"cbtest00-{n}") for n, ip in IPS.items()})
    faults = [
        FaultRecord("f1", none.normalize("partition", {"from": ["A"], "to": ["B"], "one_way": True}), seed=3),
        FaultRecord("f2", none.normalize("loss", {"from": ["C"], "to": ["B"], "probability": 0.2}), seed=3),
        FaultRecord("f3", none.normalize("delay", {"from": ["A"], "to": ["C"], "delay": "50ms"}), seed=3),
    ]
    assert none.render(faults, use_netem=False) == ours.render(faults, use_netem=False)
    assert none.render(faults, use_netem=False)["B"][0].blocked == {IPS["A"]}
    with pytest.raises(ChaosError, match="unknown wire profile 'none'; profiles: chaosbed"):
        none.normalize("discard", {"match": "UNICAST3.ACK()", "from": "B", "to": "A"})


def test_split_blocks_every_cross_link(chaos: NetnsFaultEngine) -> None:
    out = chaos.render([fault(chaos, "split", groups=[["A"], ["B", "C"]])], use_netem=False)
    assert out["A"][0].blocked == {IPS["B"], IPS["C"]}
    assert out["B"][0].blocked == out["C"][0].blocked == {IPS["A"]}


def test_delay_uses_netem_where_present_and_the_handler_elsewhere(chaos: NetnsFaultEngine) -> None:
    f = fault(chaos, "delay", **{"from": ["A"], "to": ["B"], "delay": "50ms", "jitter": "5ms"})
    rules, shapings, handler_rules, _ = chaos.render([f], use_netem=True)["B"]
    assert rules.empty() and handler_rules == []
    assert shapings[0].netem_args() == ["delay", "50ms", "5ms"]
    rules, shapings, handler_rules, max_delay = chaos.render([f], use_netem=False)["B"]
    assert shapings == [] and rules.queue_all == {IPS["A"]} and max_delay == pytest.approx(55.0)
    assert handler_rules[0]["action"] == "delay" and handler_rules[0]["delay_ms"] == pytest.approx(50.0)


def test_stateless_discard_goes_to_the_kernel_and_batches_to_the_handler(chaos: NetnsFaultEngine) -> None:
    f = fault(chaos, "discard", match="UNICAST3.ACK(seqno=50)", **{"from": "B", "to": "A"})
    rules, _, handler_rules, _ = chaos.render([f], use_netem=False)["A"]
    assert [d.source for d in rules.header_drops] == [IPS["B"]]
    assert rules.queue_batches == {IPS["B"]} and not rules.queue_ours
    assert handler_rules[0]["id"] == "f1:B" and handler_rules[0]["match"] == "UNICAST3.ACK(seqno=50)"


def test_counted_discard_goes_to_the_handler_whole(chaos: NetnsFaultEngine) -> None:
    f = fault(chaos, "discard", match="UNICAST3.ACK(seqno=50)", count=1, **{"from": "B", "to": "A"})
    rules, _, handler_rules, _ = chaos.render([f], use_netem=False)["A"]
    assert not rules.header_drops and rules.queue_ours == {IPS["B"]}
    assert handler_rules[0]["count"] == 1


def test_rule_seeds_follow_the_run_seed_and_differ_per_link(chaos: NetnsFaultEngine) -> None:
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


def test_bad_faults_name_the_problem(chaos: NetnsFaultEngine) -> None:
    with pytest.raises(ChaosError, match="unknown network fault 'kill'"):
        chaos.normalize("kill", {})
    with pytest.raises(ChaosError, match="action delay needs a delay"):
        chaos.normalize("discard", {"match": "UNICAST3.ACK()", "action": "delay"})
    with pytest.raises(ChaosError, match="count must be a whole number"):
        chaos.normalize("discard", {"match": "UNICAST3.ACK()", "count": 0})


def test_discard_is_refused_over_tcp(tmp_path: Path) -> None:
    tcp = NetnsFaultEngine(tmp_path, "cbtest00", {"A": Endpoint("A", IPS["A"], "x")}, transport="tcp")
    with pytest.raises(ChaosError, match="transport tcp"):
        tcp.normalize("discard", {"match": "UNICAST3.ACK()"})


def test_describe_reads_the_fault_table_and_faults_jsonl_alike(chaos: NetnsFaultEngine) -> None:
    from orchestration.cli.output import describe
    from orchestration.fault_log import FaultLog

    record = fault(chaos, "delay", **{"from": ["C"], "to": ["A"], "delay": "30ms", "jitter": "5ms"})
    line = FaultLog(None).fault(record, t=0)
    assert describe(record.fault) == describe(line) == "delay 30ms ± 5ms C -> A"
    assert describe({"kind": "heal", "faults": ["f3"]}) == "heal f3"


# --- timed partitions and losses (nft `meta time` gates) -------------------------------------------------------------

NOW = 1_795_426_188_418_282_496  # a CLOCK_REALTIME instant in 2026 (a multiple of 512)
HOUR = 3600 * 10**9


def rounded(ns: int) -> int:
    """ns to the nearest multiple of 512, computed independently of kernel._round512."""
    q, r = divmod(ns, 512)
    return 512 * (q + (r >= 256))


@pytest.mark.parametrize(
    "ns",
    [0, 1, 255, 256, 512, 10**9, NOW, NOW + 1, NOW + 300, NOW + HOUR, NOW + HOUR + 123_456_789, 2**63 + 5, 2**64 - 600],
)
def test_nft_time_is_a_number_of_seconds_that_wraps_to_the_bound(ns: int) -> None:
    text = kernel.nft_time(ns)
    assert text.isdigit() and int(text) < 2**55  # a plain number nft takes as seconds
    stored = int(text) * 10**9 % 2**64  # what nft 1.0.6 stores: seconds x 1e9, wrapping in u64
    assert stored == kernel.nft_time_value(text) == rounded(ns)
    assert abs(stored - ns) <= 256


def test_nft_time_of_now_and_in_an_hour() -> None:
    import time

    now = time.time_ns()
    for ns in (now, now + HOUR):
        assert kernel.nft_time_value(kernel.nft_time(ns)) == rounded(ns)


@pytest.mark.parametrize("bad", [-1, 2**64, 1.5e18, True, "1"])
def test_nft_time_refuses_what_is_not_u64_nanoseconds(bad: object) -> None:
    with pytest.raises(ValueError, match="nanoseconds"):
        kernel.nft_time(bad)  # type: ignore[arg-type]


def test_window_is_half_open_and_validated() -> None:
    w = kernel.Window(NOW, NOW + 1000)
    assert [w.contains(t) for t in (NOW - 1, NOW, NOW + 999, NOW + 1000)] == [False, True, True, False]
    assert kernel.Window(None, NOW).contains(0) and kernel.Window(NOW, None).contains(2**63)
    assert kernel.Window().nft_bounds() == ""  # unbounded: always in force
    assert kernel.Window(NOW, NOW).nft_bounds() is None  # empty: nothing rendered
    assert kernel.Window(NOW + 1, NOW + 100).nft_bounds() is None  # empty once rounded to 512 ns
    with pytest.raises(ValueError, match="before its start"):
        kernel.Window(NOW, NOW - 1)
    with pytest.raises(ValueError, match=r"Window\.start"):
        kernel.Window(-5, None)
    with pytest.raises(ValueError, match=r"Window\.end"):
        kernel.Window(None, 1.5)  # type: ignore[arg-type]


def test_timed_rules_make_the_namespace_rules_non_empty_without_a_queue() -> None:
    blocks = kernel.NamespaceRules(timed_blocks=[kernel.TimedBlock("10.0.0.10", kernel.Window(NOW, NOW + HOUR))])
    losses = kernel.NamespaceRules(timed_losses=[kernel.TimedLoss("10.0.0.10", 0.5, kernel.Window(NOW, None))])
    for rules in (blocks, losses):
        assert not rules.empty() and rules.needs_nft() and not rules.needs_queue()
        assert "table inet chaosbed {\n" in kernel.nft_script(rules)
        assert kernel.iptables_script(rules).splitlines()[2:] == ["COMMIT"]  # no iptables rule for them
    assert kernel.NamespaceRules().empty()


def time_bounds(line: str) -> list[tuple[str, int]]:
    """(operator, stored ns) of each `meta time` bound of one nft rule line."""
    return [(op, kernel.nft_time_value(n)) for op, n in re.findall(r"meta time (>=|<) (\d+)", line)]


def test_nft_script_renders_timed_blocks_and_losses_with_time_bounds() -> None:
    start, end = NOW + 100_000_123, NOW + HOUR + 777  # not multiples of 512
    rules = kernel.NamespaceRules(
        blocked={"10.0.0.9"},
        losses=[("10.0.0.8", 0.1)],
        timed_blocks=[
            kernel.TimedBlock("10.0.0.10", kernel.Window(start, end)),
            kernel.TimedBlock("10.0.0.11", kernel.Window(None, end)),
            kernel.TimedBlock("10.0.0.13", kernel.Window(end, end)),  # empty: not rendered
        ],
        timed_losses=[kernel.TimedLoss("10.0.0.12", 0.25, kernel.Window(start, None))],
    )
    script = kernel.nft_script(rules)
    rule_lines = [line.strip() for line in script.splitlines() if "counter drop" in line]
    assert rule_lines[0] == 'ip saddr @blocked counter drop comment "blocked"'
    assert rule_lines[1].startswith("ip saddr 10.0.0.10 meta time >= ")
    assert rule_lines[1].endswith(' counter drop comment "blocked"')
    assert time_bounds(rule_lines[1]) == [(">=", rounded(start)), ("<", rounded(end))]
    assert rule_lines[2].startswith("ip saddr 10.0.0.11 meta time < ")
    assert time_bounds(rule_lines[2]) == [("<", rounded(end))]
    assert rule_lines[3] == 'ip saddr 10.0.0.8 numgen random mod 1000000 < 100000 counter drop comment "lost"'
    assert rule_lines[4].startswith("ip saddr 10.0.0.12 meta time >= ")
    assert rule_lines[4].endswith(' numgen random mod 1000000 < 250000 counter drop comment "lost"')
    assert time_bounds(rule_lines[4]) == [(">=", rounded(start))]
    assert len(rule_lines) == 5 and "10.0.0.13" not in script
    assert "elements = { 10.0.0.9 }" in script


def test_a_certain_loss_has_no_random_draw() -> None:
    window = kernel.Window(NOW, NOW + HOUR)
    script = kernel.nft_script(
        kernel.NamespaceRules(losses=[("10.0.0.8", 1.0)], timed_losses=[kernel.TimedLoss("10.0.0.9", 1, window)])
    )
    assert 'ip saddr 10.0.0.8 counter drop comment "lost"' in script  # nft refuses `mod 1000000 < 1000000`
    assert "numgen" not in script and "ip saddr 10.0.0.9 meta time >= " in script


NFT_LISTING = """table inet chaosbed {
	set blocked {
		type ipv4_addr
		elements = { 10.0.0.9 }
	}

	chain input {
		type filter hook input priority filter - 10; policy accept;
		ip saddr @blocked counter packets 3 bytes 300 drop comment "blocked"
		ip saddr 10.0.0.10 meta time >= "2026-11-23 10:30:00" meta time < "2026-11-23 11:30:00" counter packets 40 bytes 4000 drop comment "blocked"
		ip saddr 10.0.0.8 numgen random mod 1000000 < 100000 counter packets 5 bytes 500 drop comment "lost"
		ip saddr 10.0.0.12 meta time >= "2026-11-23 10:30:00" numgen random mod 1000000 < 250000 counter packets 7 bytes 700 drop comment "lost"
	}
}
"""  # noqa: E501  (nft's own listing)


def test_counters_classify_nft_rules_by_their_comment() -> None:
    assert kernel.parse_nft_counters(NFT_LISTING) == {"blocked": 43, "lost": 12}
    legacy = NFT_LISTING.replace(' comment "blocked"', "").replace(' comment "lost"', "")
    assert kernel.parse_nft_counters(legacy) == {"blocked": 3, "lost": 52}  # older tables: by the @blocked text
    assert kernel.parse_nft_counters("") == {"blocked": 0, "lost": 0}


def test_counters_of_the_iptables_chain() -> None:
    listing = """Chain CHAOSBED (1 references)
    pkts      bytes target     prot opt in     out     source               destination
       4      400 DROP       17   --  *      *       10.0.0.10            0.0.0.0/0            u32 "..."
      11     1100 NFQUEUE    0    --  *      *       10.0.0.11            0.0.0.0/0            NFQUEUE num 0 bypass
"""
    assert kernel.parse_iptables_counters(listing) == {"dropped": 4, "queued": 11}


NETLINK_LISTING = """inet t input 2
  [ meta load time => reg 1 ]
  [ byteorder reg 1 = hton(reg 1, 8, 8) ]
  [ cmp gte reg 1 0x00000000 0x00ca9a3b ]
  [ meta load time => reg 1 ]
  [ byteorder reg 1 = hton(reg 1, 8, 8) ]
  [ cmp lt reg 1 0x00000000 0x00943577 ]
  [ counter pkts 0 bytes 0 ]
  [ immediate reg 0 drop ]
"""  # `nft --debug=netlink` of `meta time >= 1 meta time < 2` on x86-64 (registers printed as host-order words)


@pytest.mark.skipif(sys.byteorder != "little", reason="the canned listing is from a little-endian host")
def test_netlink_time_bounds_decode_the_registers() -> None:
    assert kernel.netlink_time_bounds(NETLINK_LISTING) == [("gte", 10**9), ("lt", 2 * 10**9)]
    assert kernel.netlink_time_bounds("[ cmp gte reg 1 0x00000000 0x00ca9a3b ]") == []  # not a time comparison


def test_timed_rules_are_refused_without_time_gates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel, "check_tools", lambda: None)
    monkeypatch.setattr(kernel, "time_gates", lambda: (False, "nft stored the wrong bounds"))
    monkeypatch.setattr(kernel, "_run", lambda *a, **k: pytest.fail("nothing may be installed"))
    rules = kernel.NamespaceRules(timed_blocks=[kernel.TimedBlock("10.0.0.10", kernel.Window(NOW, NOW + HOUR))])
    with pytest.raises(kernel.KernelError, match=r"nft stored the wrong bounds.*NFQUEUE handler"):
        kernel.apply("cbtest00-A", rules)


def test_time_gates_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOSBED_NFT_TIME", "0")
    kernel.time_gates.cache_clear()
    try:
        ok, why = kernel.time_gates()
    finally:
        kernel.time_gates.cache_clear()
    assert not ok and "CHAOSBED_NFT_TIME=0" in why
