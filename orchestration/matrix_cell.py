"""One matrix cell in its own process: `python -m orchestration.matrix_cell SPEC_JSON`.

Runs the scenario exactly as `chaosbed run` would (runner.run), without checking it (the matrix checks every cell
in one pass), and leaves `outcome.json` in the run folder: the runner's own violations (a timeout), late member
actions, warnings, what protocol-aware rules acted on, or the error that kept it from running.
Exit 0: it ran; 2: it could not run; 130: interrupted (SIGINT or SIGTERM; the cluster is taken down first).
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

from orchestration.matrix_run import CELL_OUTCOME


def _interrupt(signum: int, frame: Any) -> NoReturn:
    raise KeyboardInterrupt


def main(spec_json: str) -> int:
    from orchestration.runner import run
    from orchestration.scenario import ScenarioError, load

    spec = json.loads(spec_json)
    out = Path(spec["out"])
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        sc = load(spec["scenario"], seed=spec["seed"], settings=spec["settings"])
        outcome = run(sc, spec["backend"], out)
    except ScenarioError as e:
        _write(out, {"error": str(e)})
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _write(out, {"error": "interrupted"})
        return 130
    _write(
        out,
        {
            "timed_out": outcome.timed_out,
            "extra_violations": outcome.extra_violations,
            "late": outcome.late,
            "warnings": outcome.warnings,
            "handled": outcome.handled,
        },
    )
    return 0


def _write(out: Path, doc: dict[str, Any]) -> None:
    (out / CELL_OUTCOME).write_text(json.dumps(doc, indent=1, default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
