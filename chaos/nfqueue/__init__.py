"""Stateful chaos on NFQUEUE: count rules ("drop the 50th ACK once"), message stripping inside a batch, and userspace
delay / duplicate / reorder where the kernel has no netem. One handler process runs in ONE member's network
namespace (the receiver, DESIGN principle 4) and judges the packets that iptables rules queue to it::

    ip netns exec <member-ns> python -m chaos.nfqueue --queue N --control SOCKET [--max-len M] [--local-ip IP] [--tag T]
    ip netns exec <member-ns> iptables -A INPUT -s <peer> -j NFQUEUE --queue-num N --queue-bypass

Startup prints one JSON line, ``{"ready": true, "queue": N, "pid": PID, "fail_open": true}``, or
``{"ready": false, "error": "..."}`` and exits 2. Control: JSON lines over the unix stream socket SOCKET, one reply
line per request: ``{"cmd": "rules", "rules": [...]}``, ``{"cmd": "stats"}``, ``{"cmd": "stop"}`` (see `Handler`).
SIGTERM/SIGINT behave like stop. A rule (see `compile_rule`)::

    {"id": "r1", "sources": ["10.1.2.11"], "match": "UNICAST3.ACK(seqno=50)" | null,
     "action": "drop" | "delay" | "duplicate" | "reorder", "probability": 1.0, "count": null,
     "delay_ms": 0, "jitter_ms": 0, "seed": 0, "active_from_ns": null, "active_until_ns": null}

A rule with `active_from_ns` / `active_until_ns` (CLOCK_MONOTONIC nanoseconds, time.monotonic_ns(), one clock for
every namespace; null = unbounded) acts only for active_from_ns <= now < active_until_ns, `now` being when the
packet arrived (the kernel's receive stamp, NFQA_TIMESTAMP, moved to CLOCK_MONOTONIC: arrival.py; when the handler
reads a packet without one, the clock then): a scheduled fault is installed ahead of time and switches itself on
and off at its planned instants, with no request then, and a handler running behind still judges each packet by
the window it arrived in. Outside its window a rule neither matches nor counts. A link drop rule
(match null) with a window is a timed partition of that source, for systems without nft time gates
(chaos/kernel.py `time_gates`).

Packets are parsed with struct and node/wire.py's table (never scapy): per rule the (proto, type) ids and the
(offset, unpack, lo, hi) field tests are precomputed, so matching a message costs a few unpack_from calls.
Duplicated copies are sent from sockets with SO_MARK = DUP_MARK; the handler accepts marked packets untouched, so
a copy is never judged (or duplicated) again, even by a rule with no sourc

One module per job:

- spans.py: message spans of a datagram, by skipping fields with node/wire.py's table;
- ipudp.py: our datagram inside an IPv4/UDP packet, and the packet rebuilt without some messages;
- rule.py: rule validation and compiling (Rule, compile_rules) and the verdict kinds;
- judge.py: the pure judge (Judge), no I/O;
- netlink.py: the kernel queue over raw nfnetlink (KernelQueue, kernel_queue_stats, default_max_len);
- arrival.py: a queued packet's arrival on CLOCK_MONOTONIC, from the kernel's receive stamp (ArrivalClock);
- handler.py: the handler process (Handler, its control socket, signals, main), run by ``python -m chaos.nfqueue``;
- client.py: the one client of a handler (HandlerClient by socket path, HandlerProcess that starts one), used by the
  netns fault engine (chaos/netns_engine.py), the tests and the benchmark.
"""

from chaos.nfqueue.client import HandlerClient, HandlerProcess, HandlerStartError
from chaos.nfqueue.handler import DUP_MARK, REORDER_MAX_HOLD, Handler, install_signal_handlers, main
from chaos.nfqueue.ipudp import ip_checksum, strip_messages
from chaos.nfqueue.judge import Judge, Judgement
from chaos.nfqueue.netlink import (
    DEFAULT_MAX_LEN,
    MAX_MAX_LEN,
    KernelQueue,
    QueueError,
    default_max_len,
    kernel_queue_stats,
)
from chaos.nfqueue.rule import (
    ACCEPT,
    ACTIONS,
    DELAY,
    DROP,
    DUPLICATE,
    REORDER,
    Rule,
    RuleValidationError,
    compile_rule,
    compile_rules,
)
from chaos.nfqueue.spans import Span, datagram_spans

__all__ = [
    "ACCEPT",
    "ACTIONS",
    "DEFAULT_MAX_LEN",
    "DELAY",
    "DROP",
    "DUPLICATE",
    "DUP_MARK",
    "MAX_MAX_LEN",
    "REORDER",
    "REORDER_MAX_HOLD",
    "Handler",
    "HandlerClient",
    "HandlerProcess",
    "HandlerStartError",
    "Judge",
    "Judgement",
    "KernelQueue",
    "QueueError",
    "Rule",
    "RuleValidationError",
    "Span",
    "compile_rule",
    "compile_rules",
    "datagram_spans",
    "default_max_len",
    "install_signal_handlers",
    "ip_checksum",
    "kernel_queue_stats",
    "main",
    "strip_messages",
]
