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

from orchestration.explore.case import CaseResult
from orchestration.explore.real_case import REMOVE, Keep
from orchestration.explore.tables import TomlTable, as_table, table
from orchestration.explore.worker import WarmRunners, run_job, scratch_root

PREFETCH = 2  # jobs a worker holds at once: the next one is there when it finishes one
STOP_WAIT_S = 5.0
REAL_STOP_WAIT_S = 60.0  # a worker on real members takes its cluster down (namespaces, rules) before it ends


class PoolError(RuntimeError):
    """A worker process died; the message has the end of its error output."""


class InlinePool:
    """Cases run in this process when their result is asked for."""

    capacity = 1

    def __init__(self, backend: str = "sim") -> None:
        self.backend = backend
        self.queue: deque[tuple[Hashable, TomlTable, Keep, bool, int]] = deque()
        self.scratch = Path(tempfile.mkdtemp(prefix="chaosbed-explore-", dir=scratch_root()))
        self.warm = WarmRunners(self.scratch, backend)

    def submit(self, key: Hashable, raw: TomlTable, keep: Keep = REMOVE, *, tap: bool = False, warm: int = 0) -> None:
        self.queue.append((key, raw, keep, tap, warm))

    def pending(self) -> int:
        return len(self.queue)

    def next_result(self) -> tuple[Hashable, CaseResult]:
        key, raw, keep, tap, warm = self.queue.popleft()
        return key, run_job(raw, self.scratch, self.backend, keep, tap, self.warm.get(warm))

    def map(self, raws: list[TomlTable], keeps: list[Keep] | None = None) -> list[CaseResult]:
        keeps = keeps or [REMOVE] * len(raws)
        return [run_job(raw, self.scratch, self.backend, k) for raw, k in zip(raws, keeps, strict=True)]

    def close(self, *, now: bool = False) -> None:
        self.queue.clear()
        self.warm.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


class _Worker:
    def __init__(self, index: int, log_dir: Path, scratch: Path, backend: str) -> None:
        self.log = log_dir / f"worker{index}.log"
        self.log_file = self.log.open("w")
        self.real = backend != "sim"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestration.explore.worker", str(scratch / f"w{index}"), backend],
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

    def send(self, key: Hashable, raw: TomlTable, wire_id: int, keep: Keep, tap: bool = False, warm: int = 0) -> None:
        assert self.proc.stdin is not None
        job = {"id": wire_id, "raw": raw, "keep": keep.path, "keep_always": keep.always, "tap": tap, "warm": warm}
        self.proc.stdin.write((json.dumps(job) + "\n").encode())
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
        """Closes its input (it ends after its current jobs); `now` or after STOP_WAIT_S: kills it by its pid. A
        worker on real members gets SIGTERM instead (it takes its cluster down, then ends), SIGKILL only after
        REAL_STOP_WAIT_S."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            if self.real and now:
                self.proc.terminate()  # our own child: the worker turns it into an interrupt and cleans up
            self.proc.wait(timeout=REAL_STOP_WAIT_S if self.real else 0 if now else STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # our own child
            self.proc.wait()
        self.stdout.close()
        self.log_file.close()


class ProcessPool:
    """N worker processes; results come back in the order they finish."""

    def __init__(self, jobs: int, backend: str = "sim") -> None:
        self.backend = backend
        self.logs = Path(tempfile.mkdtemp(prefix="chaosbed-explore-logs-"))
        self.scratch = Path(tempfile.mkdtemp(prefix="chaosbed-explore-", dir=scratch_root()))
        self.workers = [_Worker(i, self.logs, self.scratch, backend) for i in range(jobs)]
        # a real worker holds one job: a second one waiting would run seconds later on a cluster drawn earlier
        self.prefetch = PREFETCH if backend == "sim" else 1
        self.capacity = jobs * self.prefetch
        self.queue: deque[tuple[Hashable, TomlTable, Keep, bool, int]] = deque()
        self.selector = selectors.DefaultSelector()
        for w in self.workers:
            self.selector.register(w.stdout, selectors.EVENT_READ, w)
        self._next_id = 0
        self.ready: deque[tuple[Hashable, CaseResult]] = deque()

    def submit(self, key: Hashable, raw: TomlTable, keep: Keep = REMOVE, *, tap: bool = False, warm: int = 0) -> None:
        """Queues a case; `tap`: on real members, with the wire tap (its result says what it reached); `warm` > 0:
        on a worker's warm cluster, started afresh every `warm` schedules (warm.py)."""
        self.queue.append((key, raw, keep, tap, warm))
        self._dispatch()

    def pending(self) -> int:
        return len(self.queue) + len(self.ready) + sum(len(w.inflight) for w in self.workers)

    def _dispatch(self) -> None:
        while self.queue:
            w = min(self.workers, key=lambda w: len(w.inflight))
            if len(w.inflight) >= self.prefetch:
                return
            key, raw, keep, tap, warm = self.queue.popleft()
            self._next_id += 1
            w.send(key, raw, self._next_id, keep, tap, warm)

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

    def map(self, raws: list[TomlTable], keeps: list[Keep] | None = None) -> list[CaseResult]:
        """Runs the cases in parallel and returns their results in order."""
        keeps = keeps or [REMOVE] * len(raws)
        for i, (raw, keep) in enumerate(zip(raws, keeps, strict=True)):
            self.submit(("map", i), raw, keep)
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


def make_pool(jobs: int, backend: str = "sim") -> InlinePool | ProcessPool:
    """-j 1: in this process; more: that many worker processes (each running one cluster at a time on a real
    backend)."""
    return InlinePool(backend) if jobs <= 1 else ProcessPool(jobs, backend)
