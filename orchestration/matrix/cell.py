"""One matrix cell in its own process: `python -m orchestration.matrix.cell SPEC_JSON`.

Runs the scenario exactly as `chaosbed run` would (runner.run, which leaves `outcome.json` in the run folder: the
runner's own violations, late member actions, warnings, what protocol-aware rules acted on), without checking it
(the matrix checks every cell in one pass); if it cannot run, `outcome.json` holds the error instead.
Exit 0: it ran; 2: it could not run; 130: interrupted (SIGINT or SIGTERM; the cluster is taken down first).
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from node.atomic import write_atomic
from orchestration.runner import OUTCOME_FILE, OutcomeDoc, first_interrupt_only


def main(spec_json: str) -> int:
    from orchestration.runner import run
    from orchestration.scenario import ScenarioError, load

    spec = json.loads(spec_json)
    out = Path(spec["out"])
    out.mkdir(parents=True, exist_ok=True)
    # the first SIGINT or SIGTERM interrupts the run; the ones after it (the terminal's second Ctrl-C, the matrix's
    # own signal) must not cut the cluster's teardown short
    first_interrupt_only((signal.SIGINT, signal.SIGTERM))
    try:
        sc = load(spec["scenario"], seed=spec["seed"], settings=spec["settings"])
        run(sc, spec["backend"], out)  # leaves outcome.json (runner.write_outcome)
    except ScenarioError as e:
        _write(out, {"error": str(e)})
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _write(out, {"error": "interrupted"})
        return 130
    return 0


def _write(out: Path, doc: OutcomeDoc) -> None:
    write_atomic(out / OUTCOME_FILE, json.dumps(doc, indent=1, default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
