"""The scheduler's plan of a scenario: fault ids, windows (`for`, heals, file order at one instant), instants."""

from __future__ import annotations

import pytest

from orchestration.cluster import ClusterError
from orchestration.scenario import parse
from orchestration.schedule import compile_schedule


def scenario(faults: list[dict], workload_start: str = "0s") -> object:
    return parse(
        {
            "cluster": {"members": 3},
            "workload": [{"kind": "unicast", "from": "A", "to": "B", "count": 1, "start": workload_start}],
            "faults": faults,
        }
    )


def test_windows_end_at_for_or_at_the_first_later_heal() -> None:
    s = compile_schedule(
        scenario(
            [
                {"at": "1s", "kind": "partition", "from": "A", "to": "B", "for": "5s"},
                {"at": "2s", "kind": "loss", "from": "*", "to": "*", "probability": 0.1, "for": "1s"},
                {"at": "2s", "kind": "delay", "from": "C", "to": "A", "delay": "10ms"},
                {"at": "4s", "kind": "heal"},
                {"at": "5s", "kind": "discard", "match": "UNICAST3.ACK()", "from": "B", "to": "A"},
            ]
        )
    )
    windows = {p.id: (p.fault.kind, p.start, p.end, p.ended_by_heal) for p in s.planned}
    assert windows == {
        "f1": ("partition", 1.0, 4.0, True),  # the heal at 4 s comes before its `for` runs out at 6 s
        "f2": ("loss", 2.0, 3.0, False),  # its `for` ran out first
        "f3": ("delay", 2.0, 4.0, True),
        "f4": ("discard", 5.0, None, False),  # after the heal: in force until the end
    }
    by_at = {i.at: i for i in s.instants}
    assert [p.id for p in by_at[3.0].off] == ["f2"]  # the `for` of f2 is logged as a partial heal at 3 s
    assert len(by_at[4.0].heals) == 1 and not by_at[4.0].off  # f1 and f3 end with the heal, not separately
    assert [i.at for i in s.instants] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_same_instant_keeps_file_order_and_separates_network_from_member_actions() -> None:
    s = compile_schedule(
        scenario(
            [
                {"at": "1s", "kind": "close-connection", "member": "A", "peer": "B"},
                {"at": "1s", "kind": "discard", "match": "UNICAST3.DATA(first=1)", "from": "A", "to": "B"},
                {"at": "1s", "kind": "kill", "member": "C"},
                {"at": "1s", "kind": "partition", "from": "A", "to": "C"},
                {"at": "1s", "kind": "heal"},
                {"at": "1s", "kind": "loss", "from": "A", "to": "B", "probability": 0.5},
            ]
        )
    )
    (one,) = [i for i in s.instants if i.at == 1.0]
    assert [p.id for p in one.on] == ["f1", "f2", "f3"]
    assert [f.kind for f in one.actions] == ["close-connection", "kill"]
    ends = {p.id: p.end for p in s.planned}
    assert ends == {"f1": 1.0, "f2": 1.0, "f3": None}  # the heal ends what is listed before it, not after


def test_workloads_have_their_own_instants() -> None:
    s = compile_schedule(scenario([], workload_start="2.5s"))
    assert [(i.at, len(i.workloads)) for i in s.instants] == [(2.5, 1)]
    assert s.end == 2.5


def test_a_fault_the_engine_rejects_names_it() -> None:
    """What the file's reader lets through but the fault engine refuses (a delay action without its delay; a discard
    over tcp is refused earlier, when the file is read: tests/unit/test_systems.py)."""
    fault = {"at": "1s", "kind": "discard", "match": "UNICAST3.ACK()", "from": "A", "to": "B", "action": "delay"}
    sc = parse({"cluster": {"members": 2}, "faults": [fault]})
    with pytest.raises(ClusterError, match="faults: discard: action delay needs a delay"):
        compile_schedule(sc)


class _Chaos:
    def __init__(self, offset: int | None) -> None:
        self.offset = offset

    def clock_offset(self) -> int | None:
        return self.offset


class _Cluster:
    def __init__(self, offset: int | None) -> None:
        self.chaos = _Chaos(offset)


def test_a_wall_clock_that_moved_under_the_time_gates_is_reported() -> None:
    import time

    from orchestration.schedule import _clock_check

    now_offset = time.time_ns() - time.monotonic_ns()
    assert _clock_check(_Cluster(now_offset)) == []  # type: ignore[arg-type]
    assert _clock_check(_Cluster(None)) == []  # type: ignore[arg-type]  # the simulator: no wall clock
    (warning,) = _clock_check(_Cluster(now_offset - 5_000_000))  # type: ignore[arg-type]
    assert "wall clock moved 5.0 ms" in warning
