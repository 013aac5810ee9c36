"""node/payload.py: msg_ids and padded payloads, as the checker reads them back."""

from __future__ import annotations

import pytest

from node.payload import make_msg_id, make_payload, msg_id_of, msg_id_prefix


@pytest.mark.parametrize("msg_id", ["A>B#1", "A/2>*#123456", "naïve>B#7", ""])
@pytest.mark.parametrize("size", [0, 1, 5, 6, 7, 100, 1000])
def test_a_payload_is_the_msg_id_a_nul_and_padding_up_to_the_size(msg_id: str, size: int) -> None:
    raw = msg_id.encode() + b"\0"
    payload = make_payload(msg_id, size)
    assert payload == raw + b"x" * max(0, size - len(raw))  # never shorter than the id: never cut
    assert msg_id_of(payload) == (msg_id or None)


def test_a_msg_id_is_its_prefix_and_the_counter() -> None:
    assert make_msg_id("A/2", "B", 17) == "A/2>B#17" == msg_id_prefix("A/2", "B") + "17"
    assert make_msg_id("C", "*", 1) == msg_id_prefix("C", "*") + "1" == "C>*#1"
