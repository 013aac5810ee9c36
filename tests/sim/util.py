"""Helpers for simulator tests."""

from __future__ import annotations

from orchestration.sim.simulation import Simulation

# Short timeouts keep simulated runs short; the protocol logic is the same as with the defaults.
FAST_U3 = {"unicast3": {"xmit_interval": "100ms", "min_time_between_acks": "10ms"}}
FAST_U2 = {"unicast2": {"xmit_interval": "100ms", "stable_interval": "500ms"}}
FAST = {"unicast3": FAST_U3, "unicast2": FAST_U2}


def settle(sim: Simulation, timeout: float = 60.0) -> None:
    """Runs until nothing is in flight or scheduled and every window is drained; fails at the deadline."""
    assert sim.run_until(sim.quiet, timeout), f"not quiet after {timeout}s (virtual): {counters_of(sim)}"


def counters_of(sim: Simulation) -> dict[str, dict[str, int]]:
    return {n: sim.counters(n) for n in sim.members}


def burst(sim: Simulation, src: str, dst: str, count: int, size: int = 0) -> list[str]:
    """Sends `count` messages back to back now; returns their msg_ids."""
    return [sim.send(src, dst, size=size) for _ in range(count)]


def assert_exactly_once_in_order(sim: Simulation, src: str, dst: str, expected: list[str] | None = None) -> None:
    got = sim.delivered(dst, src)
    want = sim.sent(src, dst) if expected is None else expected
    assert len(got) == len(set(got)), f"{src}->{dst}: duplicates {sorted({g for g in got if got.count(g) > 1})[:5]}"
    assert got == want, f"{src}->{dst}: delivered {len(got)} of {len(want)}; first difference at " + str(
        next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    )
