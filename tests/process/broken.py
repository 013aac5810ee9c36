"""What the broken-state tests share: the `chaosbed` executable in a process of its own (its own state root and
working folder, as a user in another shell), and what a command's answer must look like when the machine changed
under it: no traceback, the exit code its contract gives (2: could not run), one line saying what went wrong."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

COMMAND_TIMEOUT = 120.0
SOURCES = str(Path(__file__).resolve().parents[2])


def chaosbed_traceback(text: str) -> bool:
    """Whether the output has a traceback of chaosbed itself (its frames in the checkout, or in click, which runs
    it); a member's own traceback, quoted in an error that shows its output, is not one."""
    return "Traceback (most recent call last)" in text and (
        f'File "{SOURCES}/' in text or "site-packages/click/" in text
    )


@dataclass
class Answer:
    args: tuple[str, ...]
    code: int
    out: str
    err: str

    def problems(self, codes: tuple[int, ...]) -> list[str]:
        """What is wrong with this answer, given the exit codes it may have ([] when it is right)."""
        text = self.out + self.err
        found = []
        if chaosbed_traceback(text):
            found.append("a traceback")
        if "Usage: " in self.err:
            found.append("a usage error (the test's command line is wrong)")
        if self.code not in codes:
            found.append(f"exit {self.code}, not {' or '.join(map(str, codes))}")
        if self.code == 2 and not any(w in text for w in ("Error:", "error:", "could not", "cannot")):
            found.append("exit 2 without an error line")
        if not found:
            return []
        tail = "\n    ".join(text.strip().splitlines()[-6:])
        return [f"chaosbed {' '.join(self.args)}: {', '.join(found)}:\n    {tail}"]


class Shell:
    """A user's shell: `chaosbed ARGS` with CHAOSBED_STATE and the working folder of this test (and any extra
    environment), never the suite's own state root."""

    def __init__(self, folder: Path, **env: str) -> None:
        self.folder = folder
        self.state = folder / "state"
        self.env = {**os.environ, "CHAOSBED_STATE": str(self.state), "COLUMNS": "200", **env}

    def __call__(self, *args: str, timeout: float = COMMAND_TIMEOUT) -> Answer:
        proc = subprocess.run(
            [sys.executable, "-m", "orchestration.cli", *args],
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return Answer(args, proc.returncode, proc.stdout, proc.stderr)

    def labels(self) -> list[str]:
        return sorted(p.name for p in self.state.glob("cb*") if p.is_dir()) if self.state.is_dir() else []

    def state_file(self, label: str) -> Path:
        return self.state / label / "state.json"

    def member_pids(self, label: str) -> list[int]:
        state = json.loads(self.state_file(label).read_text())
        return [m["pid"] for m in state["members"].values() if m.get("pid")]


def fingerprints(folder: Path) -> dict[str, str]:
    """Every file under folder with its content's hash: what was written must stay as it was."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file()}  # fmt: skip
