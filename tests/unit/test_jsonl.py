"""node/jsonl.py, the one JSON-lines request client, against small servers on socketpairs and a unix socket."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from node import jsonl


def serve_once(answer: Callable[[bytes], bytes | None]) -> tuple[socket.socket, threading.Thread]:
    """A socketpair whose far end reads one request line and writes answer(line) (None: close without a word)."""
    near, far = socket.socketpair()

    def run() -> None:
        with far:
            buf = b""
            while b"\n" not in buf:
                chunk = far.recv(4096)
                if not chunk:
                    return
                buf += chunk
            reply = answer(buf.split(b"\n", 1)[0])
            if reply is not None:
                far.sendall(reply)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return near, thread


def test_one_request_one_reply_on_a_given_socket_which_stays_open() -> None:
    near, thread = serve_once(lambda line: json.dumps({"ok": True, "echo": json.loads(line)}).encode() + b"\n")
    with near:
        reply = jsonl.request(near, {"cmd": "ping", "n": 1}, 5.0)
        assert reply == {"ok": True, "echo": {"cmd": "ping", "n": 1}}
        assert near.fileno() >= 0  # the caller owns a socket it passed
    thread.join(5)


def test_a_reply_in_pieces_and_bytes_after_the_line() -> None:
    def answer(_line: bytes) -> bytes:
        return b'{"ok": true, "parts": ' + b"[1, 2]}\n" + b"trailing"

    near, thread = serve_once(answer)
    with near:
        assert jsonl.request(near, {"cmd": "x"}, 5.0) == {"ok": True, "parts": [1, 2]}
    thread.join(5)


def test_peer_closed_without_a_reply() -> None:
    near, thread = serve_once(lambda _line: None)
    with near, pytest.raises(jsonl.PeerClosed, match="member A closed the connection without a reply to 'stats'"):
        jsonl.request(near, {"cmd": "stats"}, 5.0, peer="member A")
    thread.join(5)
    assert issubclass(jsonl.PeerClosed, OSError)  # callers that retry on connection trouble retry on it


@pytest.mark.parametrize(
    ("reply", "match"),
    [(b"{not json\n", "with a line that is not JSON"), (b"[1, 2]\n", "with list, not a JSON object")],
)
def test_a_reply_that_is_not_a_json_object(reply: bytes, match: str) -> None:
    near, thread = serve_once(lambda _line: reply)
    with near, pytest.raises(jsonl.BadReply, match=match):
        jsonl.request(near, {"cmd": "stats"}, 5.0)
    thread.join(5)
    assert issubclass(jsonl.BadReply, ValueError)


def test_no_reply_within_the_timeout() -> None:
    near, far = socket.socketpair()
    with near, far, pytest.raises(TimeoutError, match=r"no reply from the peer to 'slow' within 0\.2 s"):
        jsonl.request(near, {"cmd": "slow"}, 0.2)


@pytest.fixture
def unix_server(tmp_path: Path) -> Iterator[str]:
    """A unix stream server answering one request line per connection; yields its path."""
    path = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(4)

    def run() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                data = conn.recv(4096)
                conn.sendall(jsonl.encode({"ok": True, "got": json.loads(data)}))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield path
    listener.shutdown(socket.SHUT_RDWR)
    listener.close()
    thread.join(5)


def test_a_connect_callable_is_called_once_and_its_socket_closed(unix_server: str) -> None:
    path = unix_server
    made: list[socket.socket] = []

    def connect() -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        made.append(s)
        return s

    assert jsonl.request(connect, {"cmd": "a"}, 5.0) == {"ok": True, "got": {"cmd": "a"}}
    assert jsonl.request(connect, {"cmd": "b"}, 5.0)["got"] == {"cmd": "b"}
    assert len(made) == 2 and all(s.fileno() == -1 for s in made)


def test_a_failing_connect_raises_its_oserror(tmp_path: Path) -> None:
    def connect() -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(tmp_path / "nobody"))
        except OSError:
            s.close()
            raise
        return s

    with pytest.raises(FileNotFoundError):
        jsonl.request(connect, {"cmd": "ping"}, 1.0)


def test_encode_is_one_line() -> None:
    line = jsonl.encode({"ok": False, "error": "a\nb"})
    assert line.endswith(b"\n") and line.count(b"\n") == 1 and b'"ok": false' in line
