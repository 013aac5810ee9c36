"""`python3 -m node.container`: a member configured from its environment, for `docker compose` (compose/).

- Name: CHAOSBED_NAME, else the compose replica number of this container (Docker's DNS names it
  "<project>-<service>-<n>.<network>"): replica 1 is A, 2 is B, ... as on every other backend.
- Peers: every replica of the service (CHAOSBED_SERVICE, default "member") that Docker's DNS knows, looked up again
  every second, so members that `--scale` adds later are reached too; and every member whose datagram arrives (its
  source address), so a member answers a newcomer's discovery before DNS lists the newcomer. The view forms by
  multicast discovery (GMS FIND), as in JGroups. Or, with CHAOSBED_PEERS ("A=host-a,B=host-b,..."; this member's
  own entry included, it gives its address), every member by name and DNS name (a swarm service each, on the swarm
  backend): all of them are looked up before the member starts (for up to SETTLE_NAMES_S) and again every second,
  so a member restarted with another address is reached at its new one.
- CHAOSBED_IP_MCAST=false: group messages are unicasts to every peer (networks without IP multicast, such as
  Docker's overlay networks; JGroups' UDP ip_mcast=false).
- Incarnation: one more than the last in this member's history file (a restarted container is a new incarnation).
- Token of the control endpoint: CHAOSBED_TOKEN (compose passes it), else a random one, printed in the first line of
  the container's log, which only those with access to the engine can read.
- CHAOSBED_STACK, CHAOSBED_TRANSPORT, CHAOSBED_PROPERTIES ("protocol.property=value,..."), CHAOSBED_CLUSTER,
  CHAOSBED_MCAST_GROUP, CHAOSBED_PORT, CHAOSBED_HISTORY_DIR: as in a scenario's [cluster] table.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from node.__main__ import serve
from node.runtime import Member, MemberConfig

T = TypeVar("T")

REFRESH_S = 1.0
SETTLE_S = 1.5  # replicas that compose starts together all show in DNS within this (measured: < 1 s for 3)
SETTLE_MAX_S = 6.0
SETTLE_NAMES_S = 30.0  # CHAOSBED_PEERS: how long a member waits for every peer's name to resolve before it starts
_REPLICA = re.compile(r"-(\d+)$")


class ConfigError(ValueError):
    """A bad environment variable; the message names it."""


def replica_name(fqdn: str) -> str | None:
    """A compose replica's member name from its DNS name: "compose-member-2.compose_default" -> "B"."""
    m = _REPLICA.search(fqdn.split(".", 1)[0])
    if m is None or not 1 <= int(m.group(1)) <= 26:
        return None
    return chr(ord("A") + int(m.group(1)) - 1)


def parse_properties(text: str) -> dict[str, dict[str, object]]:
    """ "unicast3.xmit_interval=200ms,gms.join_timeout=1s" -> {"unicast3": {"xmit_interval": "200ms"}, ...}"""
    props: dict[str, dict[str, object]] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, eq, value = item.partition("=")
        protocol, dot, name = key.strip().partition(".")
        if not eq or not dot or not protocol or not name:
            raise ConfigError(f"CHAOSBED_PROPERTIES: {item!r} is not protocol.property=value")
        props.setdefault(protocol, {})[name] = value.strip()
    return props


def next_incarnation(history: Path) -> int:
    """One more than the highest incarnation in the history file (1 for a new member)."""
    highest = 0
    try:
        with history.open("rb") as f:
            for line in f:
                try:
                    highest = max(highest, int(json.loads(line).get("incarnation", 0)))
                except (ValueError, AttributeError):
                    continue  # the cut-off last line of a killed incarnation
    except FileNotFoundError:
        pass
    return highest + 1


def _nameserver() -> str:
    try:
        for line in Path("/etc/resolv.conf").read_text().splitlines():
            if line.startswith("nameserver"):
                return line.split()[1]
    except (OSError, IndexError):
        pass
    return "127.0.0.11"  # Docker's embedded DNS


def _read_name(msg: bytes, pos: int) -> tuple[str, int]:
    """A (possibly compressed) domain name at pos; returns it and the position after it."""
    labels: list[str] = []
    end = -1
    for _ in range(128):  # bounded: a pointer loop in a bad answer ends here
        n = msg[pos]
        if n == 0:
            return ".".join(labels), (pos + 1 if end < 0 else end)
        if n & 0xC0 == 0xC0:
            if end < 0:
                end = pos + 2
            pos = struct.unpack_from("!H", msg, pos)[0] & 0x3FFF
            continue
        labels.append(msg[pos + 1 : pos + 1 + n].decode("ascii", "replace"))
        pos += 1 + n
    raise ValueError("DNS name too long")


def dns_ptr(ip: str, timeout: float = 1.0, server: tuple[str, int] | None = None) -> str | None:
    """The DNS (not /etc/hosts) name of ip: Docker's DNS names a compose replica "<project>-<service>-<n>.<net>",
    while /etc/hosts only has the container id."""
    qid = secrets.randbelow(1 << 16)
    qname = b"".join(bytes([len(p)]) + p.encode() for p in [*reversed(ip.split(".")), "in-addr", "arpa"]) + b"\0"
    query = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + qname + struct.pack("!HH", 12, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.sendto(query, server or (_nameserver(), 53))
            msg = s.recv(4096)
        except OSError:
            return None
    try:
        rid, flags, qd, an, _, _ = struct.unpack_from("!HHHHHH", msg)
        if rid != qid or flags & 0x000F or an == 0:
            return None
        pos = 12
        for _ in range(qd):
            pos = _read_name(msg, pos)[1] + 4
        for _ in range(an):
            pos = _read_name(msg, pos)[1]
            rtype, _, _, rdlen = struct.unpack_from("!HHIH", msg, pos)
            pos += 10
            if rtype == 12:
                return _read_name(msg, pos)[0]
            pos += rdlen
    except (struct.error, IndexError, ValueError):
        return None
    return None


def discover(service: str, port: int) -> dict[str, tuple[str, int]]:
    """The service's replicas that Docker's DNS knows: name -> (ip, data port)."""
    try:
        ips = {str(info[4][0]) for info in socket.getaddrinfo(service, None, socket.AF_INET, socket.SOCK_DGRAM)}
    except OSError:
        return {}
    found = {}
    for ip in ips:
        fqdn = dns_ptr(ip)
        name = replica_name(fqdn) if fqdn else None
        if name is not None:
            found[name] = (ip, port)
    return found


def parse_peers(text: str) -> dict[str, str]:
    """ "A=cb12-A,B=cb12-B" -> {"A": "cb12-A", "B": "cb12-B"} (CHAOSBED_PEERS: member name = DNS name)."""
    peers: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, host = item.partition("=")
        if not eq or not name.strip() or not host.strip():
            raise ConfigError(f"CHAOSBED_PEERS: {item!r} is not NAME=HOST")
        peers[name.strip()] = host.strip()
    return peers


def resolve_names(hosts: dict[str, str], port: int) -> dict[str, tuple[str, int]]:
    """The members whose DNS name resolves now: name -> (ip, data port)."""
    found = {}
    for name, host in hosts.items():
        try:
            found[name] = (socket.gethostbyname(host), port)
        except OSError:
            continue
    return found


def own_address(env: dict[str, str]) -> str:
    """This container's address: its entry of CHAOSBED_PEERS (its service's name on the network the members share),
    waited for up to SETTLE_NAMES_S; else what its host name resolves to."""
    name, hosts = env.get("CHAOSBED_NAME"), parse_peers(env.get("CHAOSBED_PEERS", ""))
    if not hosts:
        return socket.gethostbyname(socket.gethostname())
    if not name or name not in hosts:
        raise ConfigError(f"CHAOSBED_PEERS names no host for this member (CHAOSBED_NAME={name!r})")
    deadline = time.monotonic() + SETTLE_NAMES_S
    while True:
        try:
            return socket.gethostbyname(hosts[name])
        except OSError as e:
            if time.monotonic() > deadline:
                raise ConfigError(f"CHAOSBED_PEERS: {hosts[name]} (this member) did not resolve: {e}") from None
        time.sleep(0.2)  # DNS learns a new task's address within a second: polled with a deadline


def config_from_env(env: dict[str, str]) -> MemberConfig:
    port = int(env.get("CHAOSBED_PORT", "7800"))
    ip = own_address(env)
    fqdn = None if env.get("CHAOSBED_NAME") else dns_ptr(ip)
    name = env.get("CHAOSBED_NAME") or (replica_name(fqdn) if fqdn else None)
    if not name:
        raise ConfigError(f"no CHAOSBED_NAME, and this container's DNS name ({fqdn}) ends in no replica number 1..26")
    history = Path(env.get("CHAOSBED_HISTORY_DIR", "/history")) / f"{name}.jsonl"
    history.parent.mkdir(parents=True, exist_ok=True)
    cfg = MemberConfig(
        name=name,
        ip=ip,
        port=port,
        peers={name: (ip, port)},
        history=str(history),
        incarnation=next_incarnation(history),
        cluster=env.get("CHAOSBED_CLUSTER", "compose"),
        stack=env.get("CHAOSBED_STACK", "unicast3+nakack2"),
        properties=parse_properties(env.get("CHAOSBED_PROPERTIES", "")),
        transport=env.get("CHAOSBED_TRANSPORT", "udp"),
        mcast_group=env.get("CHAOSBED_MCAST_GROUP", "239.77.77.1"),
        token=env.get("CHAOSBED_TOKEN") or secrets.token_hex(8),
        learn_peers=True,
        ip_mcast=env.get("CHAOSBED_IP_MCAST", "true").strip().lower() not in ("0", "false", "no", "off"),
    )
    cfg.validate()
    return cfg


def off_loop(fn: Callable[..., T], *args: object) -> asyncio.Future[T]:
    """fn(*args) in a daemon thread of its own, as an awaitable. Not the loop's default executor: asyncio.run joins
    its threads at the end, and a lookup that Docker's DNS holds up (it takes 10 s to fail each name whose container
    has gone, so a refresh after the peers stopped takes 10 s a peer) would keep a stopped member's process alive."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as e:  # handed to the awaiting coroutine
            result, error = None, e
        with contextlib.suppress(RuntimeError):  # the loop has closed: the member stopped, nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name=f"off-loop-{fn.__name__}", daemon=True).start()
    return future


async def _refresh_peers(member: Member, service: str, port: int, hosts: dict[str, str]) -> None:
    while True:
        if hosts:
            found = await off_loop(resolve_names, hosts, port)
        else:
            found = await off_loop(discover, service, port)
        for name, addr in found.items():
            if name != member.cfg.name:
                member.peers[name] = addr  # a restarted replica may come back with another address
        await asyncio.sleep(REFRESH_S)


async def settled_peers(service: str, port: int) -> dict[str, tuple[str, int]]:
    """The replicas in DNS once the answer has not changed for SETTLE_S (at most SETTLE_MAX_S): replicas that
    compose starts together then know each other's addresses before their discovery, instead of each forming a
    singleton view and waiting for a merge."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_MAX_S
    found = await off_loop(discover, service, port)
    stable_since = loop.time()
    while loop.time() - stable_since < SETTLE_S and loop.time() < deadline:
        await asyncio.sleep(0.25)
        again = await off_loop(discover, service, port)
        if again != found:
            found, stable_since = again, loop.time()
    return found


async def named_peers(hosts: dict[str, str], port: int) -> dict[str, tuple[str, int]]:
    """Every member of CHAOSBED_PEERS once all of them resolve (or what resolves after SETTLE_NAMES_S): members
    whose services start together then know each other before their discovery."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_NAMES_S
    found = await off_loop(resolve_names, hosts, port)
    while len(found) < len(hosts) and loop.time() < deadline:
        await asyncio.sleep(0.2)
        found = await off_loop(resolve_names, hosts, port)
    return found


async def amain(cfg: MemberConfig, service: str, hosts: dict[str, str] | None = None) -> None:
    member = Member(cfg)
    hosts = hosts or {}
    peers = await (named_peers(hosts, cfg.port) if hosts else settled_peers(service, cfg.port))
    member.peers.update({n: a for n, a in peers.items() if n != cfg.name})
    ready = {"ip": cfg.ip, "history": cfg.history}
    await serve(member, ready, alongside=_refresh_peers(member, service, cfg.port, hosts))


def main() -> int:
    env = dict(os.environ)
    try:
        cfg = config_from_env(env)
    except (ConfigError, ValueError, OSError) as e:
        print(f"node.container: {e}", file=sys.stderr)
        return 2
    if not env.get("CHAOSBED_TOKEN"):
        print(json.dumps({"token": cfg.token}), flush=True)
    try:
        asyncio.run(amain(cfg, env.get("CHAOSBED_SERVICE", "member"), parse_peers(env.get("CHAOSBED_PEERS", ""))))
    except OSError as e:
        print(f"node {cfg.name}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
