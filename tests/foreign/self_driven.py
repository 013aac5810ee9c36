"""A member without control, for the tests of `control = false`: naive-rb (examples/naive_rb/member.py) with no
control endpoint that sends its own workload: COUNT unicasts to every other member, at 50/s, once started.

    python3 tests/foreign/self_driven.py COUNT CONFIG.json
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time

from broken_naive import load  # the example as a module (tests/foreign/ is this script's folder)


def main(count: int, config: str) -> None:
    m = load()
    with open(config) as f:
        cfg = json.load(f)
    member = m.Member(cfg)
    signal.signal(signal.SIGTERM, member.stop)
    member.history.write("start", address=member.address, stack="self-driven", transport="udp")
    for peer in member.peers:
        task = {"done": False, "sent": 0, "start": time.monotonic()}
        threading.Thread(target=member.run_task, args=(task, peer, count, 50, 50.0), daemon=True).start()
    member.network()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
