"""Where a chaosbed member's time goes under bench_jgroups5's load (root; py-spy, from the bench extra of make setup).

Three members (unicast3+nakack2 with bench_jgroups5's MATCHED timings) in namespaces; after a warm-up round, py-spy
samples the sender A and the receiver B (`py-spy record --nonblocking`: the members are never stopped) while A sends
B --messages unicasts (or multicasts them to all) of --size bytes; then the share of samples per function, by the
frame itself (self) and with what it calls (inclusive), and the share spent waiting in the event loop's selector.
Run: python -m bench.profile_member [--kind unicast|multicast] [--size 1000] [--messages 300000] [--seconds 6]
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench.bench_network as network
from bench.bench_jgroups5 import MATCHED
from orchestration.backends.netns import NetnsCluster, check_netns_available
from orchestration.cluster import ClusterSpec

IDLE = "EpollSelector.select"


def py_spy() -> str | None:
    found = Path(sys.executable).with_name("py-spy")
    return str(found) if found.exists() else shutil.which("py-spy")


def _frame(frame: str) -> str:
    """`fn (path/to/file.py:123)` -> `fn (file.py)`."""
    return re.sub(r" \((?:.*/)?([^/]+?)(?::\d+)?\)$", r" (\1)", frame)


def summary(raw: Path, top: int) -> list[str]:
    """Lines of the shares of py-spy's raw output (one `frame;frame;... count` per stack)."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_frame(f) for f in stack.split(";")]
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    if not total:
        return ["  no samples"]
    waiting = sum(v for k, v in own.items() if k.startswith(IDLE))
    out = [f"  {total} samples; waiting in the selector {waiting / total:.0%}", "  self:"]
    out += [f"    {v / total:6.1%}  {k}" for k, v in own.most_common(top)]
    out.append("  inclusive (below the event loop):")
    loop = [(k, v) for k, v in inclusive.most_common() if v < 0.97 * total]
    out += [f"    {v / total:6.1%}  {k}" for k, v in loop[: 2 * top]]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=("unicast", "multicast"), default="unicast")
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--seconds", type=int, default=6, help="how long py-spy samples (from the round's start)")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args(argv)
    if args.size < 0 or args.messages < 1 or args.seconds < 1:
        raise SystemExit("profile_member: need --size >= 0, --messages >= 1, --seconds >= 1")
    spy = py_spy()
    if spy is None:
        raise SystemExit("profile_member: no py-spy here: run make setup (the bench extra has it)")
    check_netns_available()
    spec = ClusterSpec(["A", "B", "C"], stack="unicast3+nakack2", properties=MATCHED, backend="netns")
    with NetnsCluster(spec) as cluster, tempfile.TemporaryDirectory() as tmp:
        cluster.start()
        network.wait_one_view(cluster, 3)

        def one(n: int) -> float:
            if args.kind == "unicast":
                return network.unicast3(cluster, n, args.size)[0]
            return network.nakack2(cluster, n, args.size)[0]

        one(20_000)  # warm-up
        spies = {}
        for m in ("A", "B"):
            argv_ = [spy, "record", "--nonblocking", "-r", "250", "-d", str(args.seconds), "-f", "raw"]
            argv_ += ["-o", f"{tmp}/{m}.txt", "--pid", str(cluster.members[m].pid)]
            spies[m] = subprocess.Popen(argv_, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)  # py-spy attaches
        rate = one(args.messages)
        print(f"{args.kind}, {args.size} B, {args.messages:,} messages: {rate:,.0f} msgs/s while sampled")
        for m, p in spies.items():
            _, err = p.communicate(timeout=args.seconds + 30)
            raw = Path(f"{tmp}/{m}.txt")
            if p.returncode != 0 or not raw.exists():
                raise SystemExit(f"profile_member: py-spy on {m} failed: {err.strip()[-500:]}")
            print(f"{m} ({'sender' if m == 'A' else 'receiver'}):")
            print("\n".join(summary(raw, args.top)))


if __name__ == "__main__":
    main()
