"""Runs the quick benchmarks and prints their figures."""

import os

from bench import bench_wire_judge, sim_speed, unicast3_cost

print("== simulator ==")
sim_speed.main([])
print("== UNICAST3 processing cost ==")
unicast3_cost.main([])
print("== the NFQUEUE judge per datagram on each wire: chaosbed's, JGroups 2.12's, JGroups 5's ==")
bench_wire_judge.main()
if os.geteuid() == 0:
    from bench import bench_network

    print("== real network: two members in network namespaces ==")
    bench_network.main(["--messages", "100000"])
    from bench import bench_nfqueue

    print("== the NFQUEUE handler: throughput and added latency of a stateful rule ==")
    bench_nfqueue.main(["--seconds", "2", "--repeats", "3"])
    from bench import bench_schedule

    print("== faults on time: 20 scheduled faults on 4 netns members, observed with probes ==")
    bench_schedule.main(["--rounds", "2"])
    from bench import bench_foreign

    print("== the foreign-member path against the native one: chaosbed's own member both ways ==")
    bench_foreign.main(["--repeats", "5", "--up-repeats", "15", "--messages", "100000"])
else:
    print("(real-network benchmark skipped: it needs root for network namespaces)")
from bench import bench_matrix  # noqa: E402

print("== matrices: cells per minute and the one check pass ==")
bench_matrix.main([] if os.geteuid() == 0 else ["--sim-only"])
