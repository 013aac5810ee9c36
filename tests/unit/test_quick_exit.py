"""orchestration/cli/quick_exit.py: a finished command ends with its status, its output and its atexit handlers, and
without the interpreter's module teardown, unless a non-daemon thread still runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import atexit, sys, threading
from orchestration.cli.quick_exit import run_then_exit

class Teardown:
    def __del__(self):
        print("module teardown ran", flush=True)

KEEP = Teardown()  # freed when the interpreter tears the module down, never with os._exit
atexit.register(lambda: print("atexit ran"))

def command():
    print("the verdict")  # a pipe: block-buffered until flushed
    {body}

run_then_exit(command)
"""


def _run(body: str) -> subprocess.CompletedProcess[str]:
    code = PROGRAM.format(body=textwrap.indent(textwrap.dedent(body), "    ").strip())
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)


@pytest.mark.parametrize(
    ("body", "status", "stderr"),
    [
        ("return None", 0, ""),
        ("sys.exit(3)", 3, ""),
        ("sys.exit(None)", 0, ""),
        ("sys.exit('chaosbed: no such run folder')", 1, "chaosbed: no such run folder"),
    ],
)
def test_the_status_output_and_atexit_handlers_without_the_teardown(body: str, status: int, stderr: str) -> None:
    proc = _run(body)
    assert proc.returncode == status, proc
    assert proc.stdout.splitlines() == ["the verdict", "atexit ran"], proc.stdout
    assert proc.stderr.strip() == stderr


def test_a_running_thread_gets_the_normal_exit() -> None:
    proc = _run("""
        done = threading.Event()
        def work():
            done.wait(0.3)
            print("thread finished", flush=True)
        threading.Thread(target=work).start()
        sys.exit(4)
    """)
    assert proc.returncode == 4, proc
    assert proc.stdout.splitlines()[:2] == ["the verdict", "thread finished"], proc.stdout
    assert "module teardown ran" in proc.stdout, "the normal exit tears the modules down"


def test_the_command_line_ends_through_it() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestration", "check", "/nonexistent/run"], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 2 and "/nonexistent/run" in proc.stderr, proc
