"""Live progress of explore: schedules tried and per second, failures so far, the time left of a time budget (or
the schedules left of a count), then each shrink and confirmation. On a terminal one live line (rich, as the rest
of the CLI); elsewhere (logs, CI, pipes) a plain line every PLAIN_EVERY_S seconds, and whenever a failure is found."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.text import Text

from orchestration.explore.search import Progress

PLAIN_EVERY_S = 10.0


def _clock(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def search_line(p: Progress) -> str:
    rate = p.tried / p.elapsed if p.elapsed > 0 else 0.0
    parts = [f"{p.tried:,} schedules ({rate:.1f}/s)", f"{p.failures} failure(s)"]
    if p.other:
        parts.append(f"{p.other} other failure(s) left aside")
    if p.errors:
        parts.append(f"{p.errors} could not run")
    if p.budget is not None:
        parts.append(f"{_clock(p.budget - p.elapsed)} left")
    elif p.schedules is not None and rate > 0:
        parts.append(f"ETA {_clock((p.schedules - p.tried) / rate)}")
    return "searching: " + ", ".join(parts)


class Reporter:
    """Prints progress on `console`; use as a context manager around the whole exploration."""

    def __init__(self, console: Console, *, live: bool | None = None) -> None:
        self.console = console
        self.live_mode = console.is_terminal if live is None else live
        self.live: Live | None = None
        self.last_plain = 0.0
        self.last_text = ""
        self.failures = 0

    def __enter__(self) -> Reporter:
        if self.live_mode:
            self.live = Live(Text(""), console=self.console, refresh_per_second=4, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if self.live is not None:
            self.live.__exit__(et, ev, tb)
            self.live = None

    def status(self, text: str, *, force: bool = False) -> None:
        """The current state: the live line, or a plain line now and then (always when `force`)."""
        self.last_text = text
        if self.live is not None:
            self.live.update(Text(text))
            return
        now = time.monotonic()
        if force or now - self.last_plain >= PLAIN_EVERY_S:
            self.last_plain = now
            self.console.print(text, markup=False, highlight=False)

    def search(self, p: Progress) -> None:
        changed = p.failures != self.failures
        self.failures = p.failures
        self.status(search_line(p), force=p.tried == 1 or changed)

    def say(self, text: str) -> None:
        """A line that stays (above the live line)."""
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)
