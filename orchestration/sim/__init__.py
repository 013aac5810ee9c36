"""The deterministic simulator: many members in one process on a virtual clock, a seeded network.

`Simulation` (simulation.py) is the API users and tests drive directly: members running the real sans-IO stack,
its `network` (network.py: `LinkFaults`, `MessageRule`) and its `workload` (workload.py). `SimCluster` (cluster.py)
puts the Cluster API on top of it, with the netns engine's fault kinds (faults.py), so `chaosbed run --backend sim`
runs the same scenario files as real members.
"""

from orchestration.sim.network import LinkFaults, MessageRule
from orchestration.sim.simulation import Simulation

__all__ = ["LinkFaults", "MessageRule", "Simulation"]
