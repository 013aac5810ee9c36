"""The CLI's layout (orchestration/cli*.py): `python -m orchestration.cli` is the whole command line, and the
command modules do not import cli.py (which alone adds them to `main`), so there is no import cycle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import orchestration
from orchestration.cli import main

CLI_MODULES = sorted(p.stem for p in Path(orchestration.__file__).parent.glob("cli_*.py"))


def test_python_m_orchestration_cli_has_every_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    listed = {line.split()[0] for line in out.split("Commands:", 1)[1].splitlines() if line.strip()}
    assert listed == set(main.commands)
    assert {"up", "run", "demo", "fault", "matrix", "spark", "sim", "compose", "stacks"} <= listed


@pytest.mark.parametrize("module", CLI_MODULES)
def test_a_command_module_does_not_import_cli(module: str) -> None:
    code = f"import sys, orchestration.{module}; sys.exit('orchestration.cli' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0, f"orchestration.{module} imports cli.py"
