"""naive-rb (examples/naive_rb/member.py) with one thing broken, for `chaosbed conform`'s tests:

    python3 tests/foreign/broken_naive.py VARIANT CONFIG.json

no-start (never writes `start`), wrong-clock (t is CLOCK_REALTIME), after-stop (writes a line after `stop`),
no-ping (no control endpoint at all). Each changes one piece of the example and leaves the rest as it is."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "naive_rb" / "member.py"


def load() -> Any:
    spec = importlib.util.spec_from_file_location("naive_rb_member", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def broken(variant: str) -> Any:
    m = load()

    class NoStart(m.History):  # type: ignore[name-defined,misc]
        def write(self, event: str, **fields: Any) -> None:
            if event != "start":
                super().write(event, **fields)

    class WrongClock(m.History):  # type: ignore[name-defined,misc]
        def clock(self) -> int:
            return time.time_ns()

    class AfterStop(m.History):  # type: ignore[name-defined,misc]
        def write(self, event: str, **fields: Any) -> None:
            super().write(event, **fields)
            if event == "stop":
                self.closed = False
                super().write("left")

    histories = {"no-start": NoStart, "wrong-clock": WrongClock, "after-stop": AfterStop}
    if variant in histories:
        m.History = histories[variant]
    elif variant == "no-ping":
        m.serve_control = lambda *args: print("broken_naive: no control endpoint in this variant", file=sys.stderr)
    else:
        raise SystemExit(f"unknown variant {variant!r}: {', '.join([*histories, 'no-ping'])}")
    return m


if __name__ == "__main__":
    broken(sys.argv[1]).main([sys.argv[0], sys.argv[2]])
