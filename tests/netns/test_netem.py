"""netem shaping (chaos/netem.py). This kernel has no sch_netem: the delay test is skipped with the probe's reason
and the chaos engine uses NFQUEUE held verdicts instead (tests/netns/test_faults.py). The ifb redirect plumbing that
netem hangs off is still checked here, with a pfifo leaf in netem's place."""

from __future__ import annotations

import statistics
import subprocess
from collections.abc import Iterator

import pytest

from chaos import netem
from orchestration.backends.netns import NetnsCluster
from orchestration.cluster import ClusterSpec
from tests.clusters import assert_nothing_left, chaos_tests
from tests.netns.linkprobe import probe

pytestmark = chaos_tests()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsCluster]:
    c = NetnsCluster(ClusterSpec(["A", "B"], backend="netns"), workdir=tmp_path_factory.mktemp("netem"))
    c.start()
    try:
        yield c
    finally:
        c.down()
        assert_nothing_left(c)


def test_the_probe_agrees_with_the_kernel(cluster: NetnsCluster) -> None:
    """Where the probe says no, the kernel refuses a netem qdisc and the reason names netem; where it says yes, a
    netem shaping installs in a member's namespace (and its delay is measured by test_netem_delay_per_source)."""
    available, why = netem.probe()
    ns = cluster.member_ns("B")
    if not available:
        assert "netem" in why.lower(), why
        refused = subprocess.run(
            ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
            capture_output=True,
            text=True,
        )
        assert refused.returncode != 0, "the probe said no netem, but the kernel took a netem qdisc"
        return
    assert why == ""
    netem.apply(ns, [netem.Shaping(cluster.members["A"].ip, delay_ms=5)])
    try:
        shown = subprocess.run(
            ["ip", "netns", "exec", ns, "tc", "qdisc", "show"], capture_output=True, text=True, check=True
        ).stdout
        assert "netem" in shown, shown
    finally:
        netem.clear(ns)


def test_the_ifb_redirect_passes_traffic_and_is_removed(cluster: NetnsCluster) -> None:
    ns = cluster.member_ns("B")
    a_ip = cluster.members["A"].ip
    netem.apply(ns, [netem.Shaping(a_ip, delay_ms=50)], leaf=["pfifo", "limit", "10000"])
    try:
        assert netem.installed(ns)
        got = probe(cluster, "A", "B", 300, quiet=0.3)
        assert len(got.unique) == 300, "packets redirected through the ifb must all arrive"
    finally:
        netem.clear(ns)
    assert not netem.installed(ns)


@pytest.mark.skipif(not netem.available(), reason=f"no netem here: {netem.probe()[1]}")
def test_netem_delay_per_source(cluster: NetnsCluster) -> None:
    ns = cluster.member_ns("B")
    base = statistics.median(probe(cluster, "A", "B", 300, rate=300, quiet=0.3).latencies_ms())
    netem.apply(ns, [netem.Shaping(cluster.members["A"].ip, delay_ms=50)])
    try:
        delayed = probe(cluster, "A", "B", 300, rate=300, quiet=0.5)
    finally:
        netem.clear(ns)
    assert len(delayed.unique) == 300
    assert 40 <= statistics.median(delayed.latencies_ms()) - base <= 65


def test_netem_args() -> None:
    assert netem.Shaping("1.2.3.4", delay_ms=50, jitter_ms=5).netem_args() == ["delay", "50ms", "5ms"]
    assert netem.Shaping("1.2.3.4", reorder=0.25).netem_args() == ["delay", "10ms", "reorder", "25%"]
    assert netem.Shaping("1.2.3.4", duplicate=0.1).netem_args() == ["duplicate", "10%"]
