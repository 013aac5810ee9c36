"""A real member's send line is in its history file (handed to the OS) before the datagram carrying the message
leaves (node/runtime.py after_io): a SIGKILL between the two cannot leave a message that a receiver delivers and the
sender's history does not have (a phantom to the checker)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from node.runtime import Member, MemberConfig

MSG = re.compile(rb"A>B#\d+")  # incarnation 1 has no /1 in its ids


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_a_send_line_reaches_the_file_before_its_datagram(tmp_path: Path, transport: str) -> None:
    history = tmp_path / "A.jsonl"
    cfg = MemberConfig(
        name="A",
        ip="127.0.0.1",
        port=0,
        peers={"A": ("127.0.0.1", 0), "B": ("127.0.0.1", 9)},
        history=str(history),
        stack="unicast3",
        transport=transport,
        token="t",
    )
    seen: list[tuple[bytes, bool]] = []  # (msg_id, its send line was in the file when the datagram left)

    async def main() -> None:
        member = Member(cfg)
        await member.start()

        def record(dest: str, data: bytes) -> None:
            written = history.read_bytes()
            seen.extend((m, b'"msg_id":"' + m + b'"' in written) for m in MSG.findall(data))

        member._send_udp = record  # type: ignore[method-assign]
        member._send_tcp = record  # type: ignore[method-assign]
        try:
            for _ in range(3):
                member.send_burst("B", member.peer_address("B"), 5, 50)
                member.after_io()
        finally:
            await member.stop()

    asyncio.run(main())
    assert len({m for m, _ in seen}) == 15, seen
    assert all(in_file for _, in_file in seen), [m for m, ok in seen if not ok]
