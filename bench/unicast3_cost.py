"""UNICAST3 per-message processing cost, sans-IO (no sockets), on this machine.

- protocol only: sender.send() + receiver.handle() of the resulting messages + sender.handle() of the acks,
  in batches of 1 and of 100 messages (one ACK per batch is how batching pays);
- full stack: the same through node/stack.py, i.e. with wire encoding, bundling and decoding.
Run: python -m bench.unicast3_cost
"""

from __future__ import annotations

import argparse

from bench.common import median_time, report
from node.protocols.base import Effects
from node.protocols.unicast3 import Unicast3, Unicast3Props
from node.stack import build_stack


def protocol_only(n: int, batch: int) -> None:
    a, b = Unicast3("A", Unicast3Props(ack_threshold=batch)), Unicast3("B", Unicast3Props(ack_threshold=batch))
    out_a, out_b = Effects(), Effects()
    now = 0.0
    for _ in range(n // batch):
        for _ in range(batch):
            a.send("B", b"x" * 100, now, out_a)
        b.handle("A", [m for _, m in out_a.sends], now, out_b)
        out_a.sends.clear()
        a.handle("B", [m for _, m in out_b.sends], now, out_a)
        out_b.clear()
        now += 0.001


def full_stack(n: int, batch: int) -> None:
    a = build_stack("A", "unicast3", {"unicast3": {"ack_threshold": batch}})
    b = build_stack("B", "unicast3", {"unicast3": {"ack_threshold": batch}})
    now = 0.0
    for _ in range(n // batch):
        for _ in range(batch):
            a.send("B", b"x" * 100, now)
        for _, data in a.drain().datagrams:
            b.receive(data, now)
        for _, data in b.drain().datagrams:
            a.receive(data, now)
        now += 0.001


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=100_000)
    n = ap.parse_args(argv).messages
    for batch in (1, 100):
        t = median_time(lambda batch=batch: protocol_only(n, batch))
        report(f"unicast3 protocol only, batches of {batch}", t / n * 1e6, "us/msg", f"({n / t:,.0f} msgs/s)")
    for batch in (1, 100):
        t = median_time(lambda batch=batch: full_stack(n, batch))
        report(f"unicast3 + wire + bundling, batches of {batch}", t / n * 1e6, "us/msg", f"({n / t:,.0f} msgs/s)")


if __name__ == "__main__":
    main()
