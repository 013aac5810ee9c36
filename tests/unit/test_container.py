"""node/container.py (a member configured from its environment, for docker compose) and the runtime's peer
learning it turns on: names from replica numbers, DNS PTR answers parsed by hand (standard library only), the
incarnation from the history file, and a peer's address learned from its first datagram."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from pathlib import Path

import pytest

from node import wire
from node.container import ConfigError, dns_ptr, next_incarnation, parse_properties, replica_name
from node.runtime import Member, MemberConfig


@pytest.mark.parametrize(
    ("fqdn", "name"),
    [
        ("chaosbed-member-1.chaosbed_chaos", "A"),
        ("proj-member-3", "C"),
        ("x-member-26.net", "Z"),
        ("x-member-27.net", None),
        ("x-member-0.net", None),
        ("9a766cad4af9", None),
    ],
)
def test_replica_numbers_name_members(fqdn: str, name: str | None) -> None:
    assert replica_name(fqdn) == name


def test_properties_from_the_environment() -> None:
    assert parse_properties("unicast3.xmit_interval=200ms, gms.join_timeout=1s,,") == {
        "unicast3": {"xmit_interval": "200ms"},
        "gms": {"join_timeout": "1s"},
    }
    assert parse_properties("") == {}
    with pytest.raises(ConfigError, match=r"CHAOSBED_PROPERTIES: 'xmit_interval=1s' is not protocol\.property"):
        parse_properties("xmit_interval=1s")


def test_the_incarnation_follows_the_history_file(tmp_path: Path) -> None:
    history = tmp_path / "B.jsonl"
    assert next_incarnation(history) == 1
    lines = [{"t": 1, "member": "B", "incarnation": 1, "event": "start"}, {"t": 2, "incarnation": 2, "event": "x"}]
    history.write_text("".join(json.dumps(e) + "\n" for e in lines) + '{"t": 3, "incarn')  # killed mid-line
    assert next_incarnation(history) == 3


ACK = wire.header_class("UNICAST3", "ACK")(seqno=1, conn_id=1, timestamp=0)


def _name(labels: list[str]) -> bytes:
    return b"".join(bytes([len(x)]) + x.encode() for x in labels) + b"\0"


def test_a_ptr_answer_with_a_compressed_name_is_read(tmp_path: Path) -> None:
    """A DNS server on loopback answers like Docker's: the answer's owner name points back at the question."""
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(5)

    def answer() -> None:
        query, client = server.recvfrom(512)
        qid = struct.unpack_from("!H", query)[0]
        question = query[12:]
        rdata = _name(["proj-member-2", "proj_chaos"])
        rr = b"\xc0\x0c" + struct.pack("!HHIH", 12, 1, 600, len(rdata)) + rdata
        server.sendto(struct.pack("!HHHHHH", qid, 0x8180, 1, 1, 0, 0) + question + rr, client)

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        fqdn = dns_ptr("172.18.0.3", server=server.getsockname())
    finally:
        thread.join(10)
        server.close()
    assert fqdn == "proj-member-2.proj_chaos" and replica_name(fqdn) == "B"


def test_no_dns_server_means_no_name() -> None:
    unused = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    unused.bind(("127.0.0.1", 0))
    port = unused.getsockname()[1]
    unused.close()
    assert dns_ptr("172.18.0.3", timeout=0.2, server=("127.0.0.1", port)) is None


def test_datagram_source_reads_the_head_only() -> None:
    data = wire.encode_datagram("compose", "B/2", None, [ACK])
    assert wire.datagram_source(data) == ("compose", "B/2")
    assert wire.datagram_source(b"\x00" * 3) is None
    assert wire.datagram_source(b"garbage that is long enough") is None


def test_a_member_learns_a_peers_address_from_its_datagram(tmp_path: Path) -> None:
    """With learn_peers a member that does not know B yet records B's source address from B's first datagram
    (a FIND under compose), so its answer reaches B; datagrams of another cluster teach it nothing."""

    async def scenario() -> tuple[dict, int]:
        cfg = MemberConfig(
            name="A",
            ip="127.0.0.1",
            port=0,
            peers={"A": ("127.0.0.1", 0)},
            history=str(tmp_path / "A.jsonl"),
            cluster="compose",
            token="t",
            mcast_group="239.77.99.1",
            mcast_port=47_991,
            mcast_loop=True,
            learn_peers=True,
        )
        member = Member(cfg)
        await member.start()
        port = member.ucast.getsockname()[1]
        b, x = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with b, x:
            b.bind(("127.0.0.1", 0))
            x.bind(("127.0.0.1", 0))
            x.sendto(wire.encode_datagram("other", "X", "A", [ACK]), ("127.0.0.1", port))
            b.sendto(wire.encode_datagram("compose", "B", "A", [ACK]), ("127.0.0.1", port))
            for _ in range(200):  # bounded: the loop reads the datagrams within a few passes
                if "B" in member.peers:
                    break
                await asyncio.sleep(0.01)
            peers, learned = dict(member.peers), member.c["peers_learned"]
            assert peers.get("B") == b.getsockname()
        await member.stop()
        return peers, learned

    peers, learned = asyncio.run(scenario())
    assert "X" not in peers and learned == 1
