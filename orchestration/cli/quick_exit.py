"""Ending a `chaosbed` command without the interpreter's teardown.

A `chaosbed check` has printed its verdict 0.2-0.25 s before its process ends: Python then tears down the modules
the checker imported (Spark Connect's gRPC, pyarrow, pandas, matplotlib: importing just those and exiting takes
0.16 s). A finished command needs none of it, so `run_then_exit` runs what atexit would (pyspark's gateway shutdown,
the Connect channel close of analysis/spark.py, logging's flush), flushes stdout and stderr and ends the process with
os._exit. It does so only when no other non-daemon thread runs: the normal exit would wait for such a thread, so
then the normal exit is taken.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable


def run_then_exit(command: Callable[[], object]) -> None:
    """Runs a click command in standalone mode (it ends with SystemExit) and ends the process with its status."""
    try:
        command()
        code: object = 0
    except SystemExit as e:
        code = e.code
    exit_now(code)


def exit_now(code: object) -> None:
    """sys.exit(code), minus the module teardown: the same status (None 0, an int itself, anything else printed to
    stderr and 1), atexit handlers run, standard streams flushed."""
    main = threading.main_thread()
    if any(t is not main and t.is_alive() and not t.daemon for t in threading.enumerate()):
        raise SystemExit(code)  # sys.exit(code): SystemExit takes any object
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()  # what the interpreter's exit would run first (CPython; also used by multiprocessing)
    for stream in (sys.stdout, sys.stderr):
        # a closed pipe (`chaosbed check | head`): nothing more can be written
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)
