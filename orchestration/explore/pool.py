"""Running cases in parallel: `ProcessPool` keeps N worker processes (orchestration/explore/worker.py: processes,
not threads, since a simulation is pure Python and holds the GIL) and hands each at most PREFETCH jobs at a time;
`InlinePool` runs them in this process, one after the other (-j 1). Both give the same results: a case depends on
its scenario only.

Workers start in a session of their own, so Ctrl-C in the terminal reaches explore alone; `close()` ends them (by
closing their input, then by their pid if they do not go)."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Hashable
from pathlib import Path
from typing import IO

from orchestration.explore.case import CaseResult, run_case
from orchestration.explore.tables import TomlTable, as_table, table
from orchestration.explore.worker import scratch_root

PREFETCH = 2  # jobs a worker holds at once: the next one is there when it finishes one
STOP_WAIT_S = 5.0


class PoolError(RuntimeError):
    """A worker process died; the message has the end of its error output."""


class InlinePool:
    """Cases run in this process when their result is asked for."""

    capacity = 1

    def __init__(self) -> None:
        self.queue: deque[tuple[Hashable, TomlTable]] = deque()
        self.scratch = Path(tempfile.mkdtemp(prefix="chaosbed-explore-", dir=scratch_root()))

    def submit(self, key: Hashable, raw: TomlTable) -> None:
        self.queue.append((key, raw))

    def pending(self) -> int:
        return len(self.queue)

    def next_result(self) -> tuple[Hashable, CaseResult]:
        key, raw = self.queue.popleft()
        return key, run_case(raw, self.scratch / "run")

    def map(self, raws: list[TomlTable]) -> list[CaseResult]:
        return [run_case(raw, self.scratch / "run") for raw in raws]

    def close(self, *, now: bool = False) -> None:
        self.queue.clear()
        shutil.rmtree(self.scratch, ignore_errors=True)


class _Worker:
    def __init__(self, index: int, log_dir: Path, scratch: Path) -> None:
        self.log = log_dir / f"worker{index}.log"
        self.log_file = self.log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestration.explore.worker", str(scratch / f"w{index}")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log_file,
            bufsize=0,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.inflight: list[Hashable] = []
        self.buffer = b""

    @property
    def stdout(self) -> IO[bytes]:
        assert self.proc.stdout is not None
        return self.proc.stdout

    def send(self, key: Hashable, raw: TomlTable, wire_id: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"id": wire_id, "raw": raw}) + "\n").encode())
        self.inflight.append(key)

    def read_lines(self) -> list[bytes]:
        """The whole lines that arrived (raises PoolError at the end of the worker's output)."""
        chunk = os.read(self.stdout.fileno(), 1 << 16)
        if not chunk:
            raise self.died()
        *lines, self.buffer = (self.buffer + chunk).split(b"\n")
        return lines

    def died(self) -> PoolError:
        tail = self.log.read_text(errors="replace").strip().splitlines()[-10:] if self.log.exists() else []
        return PoolError(f"an explore worker (pid {self.proc.pid}) died:\n" + "\n".join(tail))

    def stop(self, *, now: bool = False) -> None:
        """Closes its input (it ends after its current jobs); `now` or after STOP_WAIT_S: kills it by its pid."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=0 if now else STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # our own child
            self.proc.wait()
        self.stdout.close()
        self.log_file.close()


class ProcessPool:
    """N worker processes; results come back in the order they finish."""

    def __init__(self, jobs: int) -> None:
        self.logs = Path(tempfile.mkdtemp(prefix="chaosbed-explore-logs-"))
        self.scratch = Path(tempfile.mkdtemp(prefix="chaosbed-explore-", dir=scratch_root()))
        self.workers = [_Worker(i, self.logs, self.scratch) for i in range(jobs)]
        self.capacity = jobs * PREFETCH
        self.queue: deque[tuple[Hashable, TomlTable]] = deque()
        self.selector = selectors.DefaultSelector()
        for w in self.workers:
            self.selector.register(w.stdout, selectors.EVENT_READ, w)
        self._next_id = 0
        self.ready: deque[tuple[Hashable, CaseResult]] = deque()

    def submit(self, key: Hashable, raw: TomlTable) -> None:
        self.queue.append((key, raw))
        self._dispatch()

    def pending(self) -> int:
        return len(self.queue) + len(self.ready) + sum(len(w.inflight) for w in self.workers)

    def _dispatch(self) -> None:
        while self.queue:
            w = min(self.workers, key=lambda w: len(w.inflight))
            if len(w.inflight) >= PREFETCH:
                return
            key, raw = self.queue.popleft()
            self._next_id += 1
            w.send(key, raw, self._next_id)

    def next_result(self) -> tuple[Hashable, CaseResult]:
        if not self.pending():
            raise PoolError("no case is pending")
        while not self.ready:
            for sel_key, _ in self.selector.select():
                w: _Worker = sel_key.data
                for line in w.read_lines():
                    doc = as_table(json.loads(line), "a worker's result")
                    self.ready.append((w.inflight.pop(0), CaseResult.from_json(table(doc, "result"))))
            self._dispatch()
        return self.ready.popleft()

    def map(self, raws: list[TomlTable]) -> list[CaseResult]:
        """Runs the cases in parallel and returns their results in order."""
        for i, raw in enumerate(raws):
            self.submit(("map", i), raw)
        out: dict[int, CaseResult] = {}
        while len(out) < len(raws):
            key, res = self.next_result()
            assert isinstance(key, tuple)
            out[key[1]] = res
        return [out[i] for i in range(len(raws))]

    def close(self, *, now: bool = False) -> None:
        """Ends the workers: after their current jobs, or at once (`now`: an interrupt)."""
        self.queue.clear()
        self.selector.close()
        for w in self.workers:
            w.stop(now=now)
        shutil.rmtree(self.logs, ignore_errors=True)
        shutil.rmtree(self.scratch, ignore_errors=True)


def make_pool(jobs: int) -> InlinePool | ProcessPool:
    """-j 1: in this process; more: that many worker processes."""
    return InlinePool() if jobs <= 1 else ProcessPool(jobs)
