"""orchestration/agent/launcher.py's lookup of its own container: the engine can list it late, or as not yet running
with no pid (seen under load); the launcher waits for it, with a deadline, and says what it saw when it gives up."""

from __future__ import annotations

from typing import Any

import pytest

from orchestration.agent import launcher


class ScriptedEngine(launcher.Engine):
    """Answers the listing and the inspection from a script of container states (None: not listed yet)."""

    def __init__(self, states: list[dict[str, Any] | None]) -> None:
        super().__init__("/nowhere")
        self.states = states
        self.listings: list[str] = []

    def ok(self, method: str, path: str, body: object = None, timeout: float | None = 60.0) -> Any:
        if path.startswith("/containers/json"):
            self.listings.append(path)
            state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
            self.current = state
            return [] if state is None else [{"Id": "c1"}]
        assert path == "/containers/c1/json"
        return {"Id": "c1", "State": self.current}


def test_the_launcher_waits_until_its_container_is_listed_and_running_with_a_pid() -> None:
    engine = ScriptedEngine(
        [None, {"Running": False, "Pid": 0}, {"Running": True, "Pid": 0}, {"Running": True, "Pid": 42}]
    )
    me = launcher.own_container(engine, "task1", timeout=10)
    assert me["State"]["Pid"] == 42 and len(engine.listings) == 4
    assert all("all=1" in q and "task1" in q for q in engine.listings)  # created, not yet running, is listed too


def test_a_container_that_never_runs_is_an_error_that_says_what_the_engine_showed() -> None:
    with pytest.raises(RuntimeError, match=r"task1 .* within 0.3 s \({'Running': False, 'Pid': 0}\)"):
        launcher.own_container(ScriptedEngine([{"Running": False, "Pid": 0}]), "task1", timeout=0.3)
    with pytest.raises(RuntimeError, match=r"within 0.3 s \(not listed\)"):
        launcher.own_container(ScriptedEngine([None]), "task1", timeout=0.3)
