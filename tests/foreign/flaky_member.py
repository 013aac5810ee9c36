"""A synthetic flaky member for explore's shrink under non-determinism: naive-rb (examples/naive_rb/member.py) made
reliable enough for short delays (a retry after 2 s, three of them) that loses A's first unicast to B in one run of
EVERY, counted across runs in a file, so the rate is known and the pattern fixed (run 1 loses it, run 2 does not,
...): p = 1/EVERY without luck in the test.

    python3 tests/foreign/flaky_member.py COUNTER_FILE EVERY CONFIG.json

Only A's first incarnation counts a run. Standard library only, as a member must be."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "naive_rb" / "member.py"


def load() -> Any:
    spec = importlib.util.spec_from_file_location("naive_rb_member", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def next_run(counter: Path) -> int:
    """The number of this run (1, 2, ...), counted under a lock in the file."""
    fd = os.open(counter, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = os.pread(fd, 64, 0).decode().strip()
        n = int(text or "0") + 1
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(n).encode(), 0)
        return n
    finally:
        os.close(fd)


def flaky(counter: Path, every: int) -> Any:
    m = load()
    m.RETRY_AFTER, m.RETRIES = 2.0, 3

    class Flaky(m.Member):  # type: ignore[name-defined,misc]
        def __init__(self, cfg: dict[str, Any]) -> None:
            super().__init__(cfg)
            first = cfg["name"] == "A" and cfg.get("incarnation", 1) == 1
            self.lossy = first and next_run(counter) % every == 1 % every

        def send(self, dest: str, size: int) -> None:
            if not (self.lossy and dest == "B" and self.next.get(dest, 0) == 0):
                super().send(dest, size)
                return
            seqno = self.next[dest] = 1  # recorded as sent, never put on the wire nor retried
            msg_id = f"{self.address}>{dest}#{seqno}"
            fields = {"sender": self.name, "seqno": seqno, "msg_id": msg_id, "size": size}
            self.history.write("send", kind="unicast", dest=dest, conn_id=self.address, **fields)

    m.Flaky = Flaky
    return m


if __name__ == "__main__":
    module = flaky(Path(sys.argv[1]), int(sys.argv[2]))
    module.main([sys.argv[0], sys.argv[3]], module.Flaky)
