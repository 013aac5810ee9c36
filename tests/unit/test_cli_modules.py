"""The CLI's layout (orchestration/cli/): `python -m orchestration.cli` is the whole command line, and the command
modules do not import cli/main.py (which alone adds them to `main`), so there is no import cycle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import orchestration.cli
from orchestration.cli.main import main

CLI_MODULES = sorted(
    p.stem
    for p in Path(orchestration.cli.__file__).parent.glob("*.py")
    if p.stem not in ("__init__", "__main__", "main")
)


def test_the_cli_package_has_its_command_modules() -> None:
    assert {"cluster", "compose", "demo", "fault", "matrix", "options", "output", "run", "sim", "spark"} <= set(
        CLI_MODULES
    )


@pytest.mark.parametrize("entry", ["orchestration", "orchestration.cli"])
def test_python_m_has_every_command(entry: str) -> None:
    out = subprocess.run([sys.executable, "-m", entry, "--help"], capture_output=True, text=True, check=True).stdout
    listed = {line.split()[0] for line in out.split("Commands:", 1)[1].splitlines() if line.strip()}
    assert listed == set(main.commands)
    assert {"up", "run", "demo", "fault", "matrix", "spark", "sim", "compose", "stacks"} <= listed


@pytest.mark.parametrize("module", CLI_MODULES)
def test_a_command_module_does_not_import_main(module: str) -> None:
    code = f"import sys, orchestration.cli.{module}; sys.exit('orchestration.cli.main' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0, f"orchestration.cli.{module} imports main.py"
