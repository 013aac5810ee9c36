"""chaosbed's own member (node/) started as a foreign member is: from the contracts' config file and environment
(docs/scenario-format.md "Foreign members", docs/contracts/), so the foreign path can be measured against the native one
with the same program (bench/bench_foreign.py) and checked for parity. The registry's `chaosbed-contract` system runs
it:

    python3 -m foreign.chaosbed CONFIG.json [--stack unicast3+nakack2] [--set PROTO.PROP=VALUE ...]

The config's keys are the contract's (name, ip, port, history, incarnation, cluster, token, peers, mcast_group,
mcast_port, transport); CHAOSBED_TOKEN wins over the config's token. Members on one host (127.x addresses: the
process backend) loop multicast back to each other."""

from __future__ import annotations

from typing import Any

from node.runtime import MemberConfig


def member_config(doc: dict[str, Any], stack: str, properties: dict[str, dict[str, Any]], token: str) -> MemberConfig:
    """node's MemberConfig from a contract config (KeyError/TypeError/ValueError naming what is missing or wrong)."""
    peers = {str(n): (str(ip), int(port)) for n, (ip, port) in doc["peers"].items()}
    return MemberConfig(
        name=str(doc["name"]),
        ip=str(doc["ip"]),
        port=int(doc["port"]),
        peers=peers,
        history=str(doc["history"]),
        incarnation=int(doc["incarnation"]),
        cluster=str(doc.get("cluster", "chaosbed")),
        stack=stack,
        properties=properties,
        transport=str(doc.get("transport", "udp")),
        mcast_group=str(doc["mcast_group"]),
        mcast_port=int(doc["mcast_port"]),
        mcast_loop=str(doc["ip"]).startswith("127."),
        token=token or str(doc.get("token", "")),
    )
