"""A soak on real members: 5 members in network namespaces (unicast3+nakack2), every member streaming unicasts to
every other and two members multicasting, under a random combined nemesis (a round every 10 s: partitions, splits,
bridges, rings, flapping links, kills with restarts, pauses) for --minutes, then checked on Spark. This is
`chaosbed explore FILE --backend netns` (orchestration/explore/soak.py) with a generated FILE.

Printed: messages sent and delivered, faults applied, retransmissions, the send rate over each tenth of the run
against the planned rate (did the load hold on this machine?), the members' peak RSS, and the verdict (nothing
lost, duplicated or reordered: fifo, exactly_once, complete, no_phantoms, views_converge).

    python -m bench.bench_soak [--minutes M] [--unicast-rate R] [--multicast-rate R] [--seed N] [--out DIR]

The defaults plan 16,800 messages/s (20 unicast streams at 800/s, 2 multicasters at 400/s): the target of 10^7
messages in 10 minutes. The send rate per tenth of the run shows whether this machine held it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from orchestration.toml_text import toml_document

MEMBERS = 5


def soak_scenario(seed: int, unicast_rate: float, multicast_rate: float) -> dict[str, object]:
    """The soak's scenario: every member streams unicasts to every other, A and C multicast, short fd/merge timers."""
    properties = {
        "fd": {"interval": "0.5s", "timeout": "2s", "timeout_check_interval": "0.5s"},
        "gms": {"join_timeout": "1s", "discovery_timeout": "1s"},
        "merge": {"min_interval": "1s", "max_interval": "3s"},
    }
    return {
        "name": "bench-soak",
        "seed": seed,
        "cluster": {"members": MEMBERS, "stack": "unicast3+nakack2", "properties": properties},
        "workload": [
            {"kind": "unicast", "from": "*", "to": "*", "count": 1, "rate": unicast_rate},
            {"kind": "multicast", "from": ["A", "C"], "count": 1, "rate": multicast_rate},
        ],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--unicast-rate", type=float, default=800.0, help="messages/s of each sender to each receiver")
    ap.add_argument("--multicast-rate", type=float, default=400.0, help="messages/s of each of the 2 multicasters")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="the run folder (default: a temporary one, removed)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        scenario = Path(tmp) / "soak.toml"
        scenario.write_text(toml_document(soak_scenario(args.seed, args.unicast_rate, args.multicast_rate)))
        out = args.out or Path(tmp) / "run"
        cmd = [sys.executable, "-m", "orchestration", "explore", str(scenario), "--backend", "netns"]
        cmd += ["--budget", f"{args.minutes * 60:g}s", "--out", str(out)]
        code = subprocess.run(cmd, check=False).returncode
        soak_file = out / "soak.json"
        if not soak_file.is_file():
            print(f"bench_soak: the soak did not run (exit {code})")
            return 2
        soak = json.loads(soak_file.read_text())
    planned = MEMBERS * (MEMBERS - 1) * args.unicast_rate + 2 * args.multicast_rate
    rates = soak["send_rate"]
    print()
    print(f"soak: {soak['seconds']:g} s, {soak['members']} members, {soak['nemesis']} nemesis, {soak['rounds']} rounds")
    print(f"messages sent        {soak['sent']:>12,}   (planned {planned:,.0f}/s while sending)")
    print(f"deliveries           {soak['delivered']:>12,}")
    print(f"faults applied       {sum(soak['faults'].values()):>12,}   {soak['faults']}")
    print(f"retransmissions      {soak['retransmissions']:>12,}")
    if rates:
        print(f"send rate, msgs/s    first tenth {rates[0]:,.0f}, last {rates[-1]:,.0f}, lowest {min(rates):,.0f}")
    if soak["peak_rss_kib"]:
        print(f"peak RSS             {max(soak['peak_rss_kib'].values()) / 1024:>12.1f} MiB")
    print(f"verdict              {soak['verdict']} {soak['violated'] or ''}")
    return code


if __name__ == "__main__":
    sys.exit(main())
