"""Network faults on a real netns cluster, each with a measured effect on real datagrams (tests/netns/linkprobe.py),
and nothing of them left afterwards.

Tolerances: loss is binomial; with p = 0.2 over n = 5,000 datagrams the standard deviation is 0.57 points, so
+-3 points is a 5-sigma bound that a correct rule fails about once in 2 million runs.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from chaos import kernel
from node import wire
from orchestration.backends.netns import NetnsCluster
from orchestration.cli.main import main
from orchestration.cluster import ClusterSpec
from tests.clusters import assert_nothing_left, chaos_tests
from tests.netns.linkprobe import PROBE_PORT, probe

pytestmark = chaos_tests()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsCluster]:
    """Three idle members (stack unicast3: no membership traffic of note); probes use their own port."""
    c = NetnsCluster(ClusterSpec(["A", "B", "C"], backend="netns"), workdir=tmp_path_factory.mktemp("faults"))
    c.start()
    try:
        yield c
    finally:
        c.down()
        assert_nothing_left(c)


@pytest.fixture
def chaos(cluster: NetnsCluster) -> Iterator:
    """The cluster's fault table; every test ends healed, and the namespaces must then be free of chaos rules."""
    yield cluster.chaos
    cluster.chaos.heal()
    assert_no_rules(cluster)


def assert_no_rules(cluster: NetnsCluster) -> None:
    for name in cluster.members:
        assert kernel.installed(cluster.member_ns(name)) == {}, f"chaos rules left in {name}'s namespace"
    assert cluster.chaos.faults(stats=False) == []
    handlers = [p for p in os.listdir("/proc") if p.isdigit() and _is_handler(int(p), cluster.label)]
    assert not handlers, f"NFQUEUE handlers still running: {handlers}"


def _is_handler(pid: int, label: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return False
    return b"chaos.nfqueue" in cmdline and label.encode() in cmdline


def heard(cluster: NetnsCluster, src: str, dst: str, *, multicast: bool = False, n: int = 200) -> int:
    """How many of n datagrams from src dst receives."""
    return len(probe(cluster, src, dst, n, multicast=multicast, quiet=0.3).unique)


def test_one_way_partition_silences_one_direction_for_unicast_and_multicast(cluster: NetnsCluster, chaos) -> None:
    chaos.add("partition", {"from": ["A"], "to": ["B"], "one_way": True})
    assert heard(cluster, "A", "B") == 0
    assert heard(cluster, "A", "B", multicast=True) == 0
    assert heard(cluster, "B", "A") == 200
    assert heard(cluster, "B", "A", multicast=True) == 200
    assert heard(cluster, "A", "C", multicast=True) == 200  # the multicast itself still goes out
    chaos.heal()
    assert heard(cluster, "A", "B") == 200
    assert heard(cluster, "A", "B", multicast=True) == 200


def test_partition_both_ways(cluster: NetnsCluster, chaos) -> None:
    chaos.add("partition", {"from": ["A"], "to": ["B"]})
    assert heard(cluster, "A", "B") == 0
    assert heard(cluster, "B", "A") == 0
    assert heard(cluster, "B", "A", multicast=True) == 0
    assert heard(cluster, "C", "A") == 200


def test_split_into_groups(cluster: NetnsCluster, chaos) -> None:
    chaos.add("split", {"groups": [["A"], ["B", "C"]]})
    for src, dst in [("A", "B"), ("B", "A"), ("A", "C"), ("C", "A")]:
        assert heard(cluster, src, dst, multicast=True) == 0, f"{dst} hears {src} across the split"
    assert heard(cluster, "B", "C", multicast=True) == 200
    assert heard(cluster, "C", "B") == 200


def test_overlapping_views_a_hears_b_and_c_but_c_hears_only_b(cluster: NetnsCluster, chaos) -> None:
    chaos.add("partition", {"from": ["A"], "to": ["C"], "one_way": True})
    assert heard(cluster, "B", "A") == heard(cluster, "C", "A") == 200  # A hears B and C
    assert heard(cluster, "B", "C") == 200 and heard(cluster, "A", "C") == 0  # C hears only B
    assert heard(cluster, "A", "B") == heard(cluster, "C", "B") == 200  # B hears everyone


def test_overlapping_faults_are_removed_one_at_a_time(cluster: NetnsCluster, chaos) -> None:
    first = chaos.add("partition", {"from": ["A"], "to": ["B"], "one_way": True})
    chaos.add("split", {"groups": [["A"], ["B", "C"]]})
    chaos.remove([first.id])
    assert heard(cluster, "A", "B") == 0  # still cut by the split
    chaos.remove([f.id for f in chaos.faults(stats=False)])
    assert heard(cluster, "A", "B") == 200


def test_loss_probability_within_tolerance_over_5000_datagrams(cluster: NetnsCluster, chaos) -> None:
    chaos.add("loss", {"from": ["B"], "to": ["C"], "probability": 0.2})
    lossy = probe(cluster, "B", "C", 5000, rate=20000, quiet=0.3)
    assert abs(lossy.loss - 0.2) <= 0.03, f"measured loss {lossy.loss:.3f} for p=0.2"
    other = probe(cluster, "C", "B", 1000, rate=20000, quiet=0.3)
    assert other.loss == 0.0, "loss on B->C must not touch C->B"


@pytest.mark.skipif(
    not os.path.exists("/proc/sys/net/bridge/bridge-nf-call-iptables"),
    reason="br_netfilter is not loaded on this machine, so bridged frames never reach iptables here anyway",
)
def test_the_switch_forwards_frames_without_its_namespaces_netfilter(cluster: NetnsCluster, chaos) -> None:
    """With br_netfilter loaded, a bridged frame would cross the switch namespace's FORWARD chain: a DROP rule there
    would silence the probe. The switch has bridge-nf-call-* off, so the rule sees nothing and everything arrives."""
    sw = cluster.switch_ns
    rule = ["FORWARD", "-p", "udp", "--dport", str(PROBE_PORT), "-j", "DROP"]
    subprocess.run(["ip", "netns", "exec", sw, "iptables", "-I", *rule], check=True)
    try:
        assert heard(cluster, "A", "B") == 200
        assert heard(cluster, "A", "C", multicast=True) == 200
        listing = subprocess.run(
            ["ip", "netns", "exec", sw, "iptables", "-L", "FORWARD", "-v", "-x", "-n"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        dropped = [line.split()[0] for line in listing.splitlines() if "DROP" in line]
        assert dropped == ["0"], listing
    finally:
        subprocess.run(["ip", "netns", "exec", sw, "iptables", "-D", *rule], check=True)


def test_bad_faults_are_refused_with_the_reason(cluster: NetnsCluster, chaos) -> None:
    from chaos.faults import ChaosError

    with pytest.raises(ChaosError, match="unknown members \\['Z'\\]; members: A, B, C"):
        chaos.add("partition", {"from": ["Z"], "to": ["B"]})
    with pytest.raises(ChaosError, match=r"probability must be within 0\.\.1"):
        chaos.add("loss", {"from": ["A"], "to": ["B"], "probability": 20})
    with pytest.raises(ChaosError, match=r"unknown header UNICAST3\.NOPE; valid headers: .*UNICAST3\.ACK"):
        chaos.add("discard", {"match": "UNICAST3.NOPE()"})
    with pytest.raises(ChaosError, match="in more than one group"):
        chaos.add("split", {"groups": [["A", "B"], ["B", "C"]]})
    assert chaos.faults(stats=False) == []


def test_cli_partitions_one_way_lists_and_heals(cluster: NetnsCluster, chaos) -> None:
    runner = CliRunner()
    label = ["--cluster", cluster.label]
    result = runner.invoke(main, ["fault", "partition", "--from", "A", "--to", "B", "--one-way", *label])
    assert result.exit_code == 0, result.output
    assert "partition A -> B (one way)" in result.output
    assert heard(cluster, "A", "B") == 0 and heard(cluster, "B", "A") == 200
    listed = runner.invoke(main, ["fault", "list", *label])
    assert "partition A -> B (one way)" in listed.output
    healed = runner.invoke(main, ["fault", "heal", *label])
    assert healed.exit_code == 0 and "healed: f" in healed.output
    assert heard(cluster, "A", "B") == 200
    bad = runner.invoke(main, ["fault", "loss", "120%", "--from", "A", "--to", "B", *label])
    assert bad.exit_code != 0 and "not a probability" in bad.output
    log = (cluster.workdir / "faults.jsonl").read_text()
    assert '"kind":"partition"' in log and '"kind":"heal"' in log


def test_cli_for_heals_by_itself(cluster: NetnsCluster, chaos) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["fault", "split", "A", "B,C", "--for", "1s", "--cluster", cluster.label])
    assert result.exit_code == 0, result.output
    assert heard(cluster, "A", "B") == 0
    cluster.wait_until(lambda: chaos.faults(stats=False) == [], 15.0, "the --for timer to heal the split")
    assert heard(cluster, "A", "B") == 200


def test_process_backend_says_it_has_no_network_faults(tmp_path) -> None:
    from orchestration.backends.process import ProcessCluster
    from orchestration.cluster import ClusterError

    c = ProcessCluster(ClusterSpec(["A", "B"]), workdir=tmp_path)
    with pytest.raises(ClusterError, match=r"no network faults .* use --backend netns"):
        c.chaos.add("partition", {"from": ["A"], "to": ["B"]})


# --- faults that go through the NFQUEUE handler (this kernel has no netem) -------------------------------------------

ACK = wire.header_class("UNICAST3", "ACK")
DATA = wire.header_class("UNICAST3", "DATA")


def acks_and_data(cluster: NetnsCluster, src: str, dst: str) -> list[bytes]:
    """Single-message datagrams (ACKs 0..99 three times, DATA 1..100) and batches of 5 mixed messages."""
    out = []
    for round_ in range(3):
        for seqno in range(100):
            out.append(wire.encode_datagram("probe", src, dst, [ACK(seqno, 1, round_ * 100 + seqno)]))
    out += [wire.encode_datagram("probe", src, dst, [DATA(i, 1, i == 1, b"x" * 50)]) for i in range(1, 101)]
    for i in range(40):
        out.append(wire.encode_datagram("probe", src, dst, [ACK(40 + i, 2, i), *(DATA(j, 2, False) for j in range(4))]))
    return out


def test_delay_adds_the_requested_latency_and_loses_nothing(cluster: NetnsCluster, chaos) -> None:
    chaos.add("delay", {"from": ["A"], "to": ["B"], "delay": 0.05})
    delayed = probe(cluster, "A", "B", 400, rate=400, quiet=0.5)
    direct = probe(cluster, "C", "B", 400, rate=400, quiet=0.5)  # same receiver, a link without the fault
    assert len(delayed.unique) == 400 and len(direct.unique) == 400
    added = statistics.median(delayed.latencies_ms()) - statistics.median(direct.latencies_ms())
    assert 40 <= added <= 65, f"median added latency {added:.1f} ms for a 50 ms delay"


def test_count_1_discard_drops_exactly_the_one_matching_message(cluster: NetnsCluster, chaos) -> None:
    messages = acks_and_data(cluster, "B", "A")
    fault = chaos.add("discard", {"match": "UNICAST3.ACK(seqno=50)", "from": "B", "to": "A", "count": 1})
    got = probe(cluster, "B", "A", 0, messages=messages, rate=4000, quiet=0.5)
    first_ack_50 = next(i for i, m in enumerate(messages) if wire.decode_datagram(m).messages[0] == ACK(50, 1, 50))
    assert sorted(got.seqnos) == [i for i in range(len(messages)) if i != first_ack_50]
    assert (chaos.faults()[0].handled or {})["dropped"] == 1, chaos.faults()
    assert fault.id == chaos.faults()[0].id


def test_stateless_discard_drops_single_messages_in_the_kernel_and_strips_batches(cluster: NetnsCluster, chaos) -> None:
    messages = acks_and_data(cluster, "B", "A")
    chaos.add("discard", {"match": "UNICAST3.ACK(seqno=45..50)", "from": "B", "to": "A"})
    got = probe(cluster, "B", "A", 0, messages=messages, rate=4000, quiet=0.5)
    hit = [i for i, m in enumerate(messages) if _is_ack_in(m, 45, 50)]
    singles = [i for i in hit if len(wire.decode_datagram(messages[i]).messages) == 1]
    batches = [i for i in hit if i not in singles]
    assert len(singles) == 18 and len(batches) == 6
    untouched = [i for i in range(len(messages)) if i not in singles and i not in batches]
    assert sorted(s for s in got.seqnos if s >= 0) == untouched
    assert got.seqnos.count(-1) == len(batches)  # the batches arrive, changed: without their ACK
    assert kernel.counters(cluster.member_ns("A"))["dropped"] == len(singles)


def _is_ack_in(datagram: bytes, lo: int, hi: int) -> bool:
    return any(isinstance(m, ACK) and lo <= m.seqno <= hi for m in wire.decode_datagram(datagram).messages)


def test_duplicate_and_reorder_per_link(cluster: NetnsCluster, chaos) -> None:
    chaos.add("duplicate", {"from": ["A"], "to": ["B"], "probability": 0.3})
    dup = probe(cluster, "A", "B", 2000, rate=4000, quiet=0.5)
    share = (len(dup.seqnos) - len(dup.unique)) / 2000
    assert len(dup.unique) == 2000 and abs(share - 0.3) <= 0.05, f"duplicated share {share:.3f} for p=0.3"
    chaos.heal()
    chaos.add("reorder", {"from": ["A"], "to": ["B"], "probability": 0.2})
    reordered = probe(cluster, "A", "B", 2000, rate=4000, quiet=0.5)
    overtaken = sum(1 for a, b in itertools.pairwise(reordered.seqnos) if b < a)
    assert len(reordered.unique) == 2000 and len(reordered.seqnos) == 2000, "reorder must not lose or add"
    # The handler draws each datagram it judges (`matched`) with p = 0.2: a drawn one waits for its source's next
    # one, at most REORDER_MAX_HOLD (100 ms), and a run of drawn ones is overtaken once: p * (1 - p) = 0.16 per pair
    # when the next was sent well within the hold and judged too. A loaded machine stalls the probe's sender now and
    # then, and a starved handler's queue fails open (those pass unjudged, in order): count only what can reorder.
    (rule,) = chaos.handler_stats()["B"]["rules"].values()
    assert abs(rule["reordered"] / rule["matched"] - 0.2) <= 0.05, f"the handler's draws: {rule}"
    close = sum(1 for a, b in itertools.pairwise(reordered.sent_at) if b - a < 20_000_000)
    can_reorder = min(close, rule["matched"] - 1)
    assert can_reorder >= 1000, f"the probe's sender or the handler stalled: {close} close pairs, {rule}"
    assert 0.10 * can_reorder <= overtaken <= rule["reordered"], (
        f"{overtaken} of 2000 datagrams arrived after a later one (p=0.2; {close} sent within 20 ms of the previous;"
        f" handler {rule})"
    )


def test_a_handler_that_falls_behind_is_reported_as_a_bypass(cluster: NetnsCluster, chaos) -> None:
    """The queue is fail-open: what a stalled handler cannot take passes unjudged, and NetnsFaultEngine.queue_bypass
    counts it (the kernel numbers no packet that found the queue full: rule counter minus numbering)."""
    fault = chaos.add("delay", {"from": ["A"], "to": ["B"], "delay": 0.001})  # a handler rule on every packet A -> B
    calm = probe(cluster, "A", "B", 300, rate=3000, quiet=0.3)
    b = chaos.queue_bypass()["B"]
    assert len(calm.unique) == 300 and b.queued >= 300 and b.bypassed == 0 and b.warning() is None, b
    handler = json.loads((cluster.state_dir / "chaos.json").read_text())["handlers"]["B"]
    assert _is_handler(handler["pid"], cluster.label)
    n, ns, stalled = 8000, cluster.member_ns("B"), threading.Event()

    def resume_once_queued() -> None:  # the handler sleeps until the kernel's rule has taken every probe datagram
        deadline = time.monotonic() + 30.0
        try:
            while time.monotonic() < deadline and kernel.counters(ns)["queued"] < b.queued + n:
                stalled.wait(0.02)
        finally:
            os.kill(handler["pid"], signal.SIGCONT)

    os.kill(handler["pid"], signal.SIGSTOP)  # the engine's own handler, checked by its command line above
    resumer = threading.Thread(target=resume_once_queued)
    resumer.start()
    try:
        burst = probe(cluster, "A", "B", n, rate=20000, quiet=2.0)
    finally:
        stalled.set()
        resumer.join(35.0)
        os.kill(handler["pid"], signal.SIGCONT)
    assert len(burst.unique) == n, "fail-open lets the overflow through: nothing is lost"
    b = chaos.queue_bypass()["B"]
    (rule,) = chaos.handler_stats()["B"]["rules"].values()
    assert n - handler["max_len"] <= b.bypassed <= n, (b, handler["max_len"])
    assert abs(rule["matched"] + b.bypassed - b.queued) <= b.IN_FLIGHT, (rule, b)
    warning = b.warning()
    assert warning is not None and "at B" in warning and fault.id in warning and f"{b.bypassed:,}" in warning
    listed = CliRunner().invoke(main, ["fault", "list", "--cluster", cluster.label])  # an ad hoc user sees it too
    assert "WARNING: the NFQUEUE handler at B could not keep up" in " ".join(listed.output.split()), listed.output
