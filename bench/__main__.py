"""Runs the quick benchmarks and prints their figures."""

from bench import sim_speed, unicast3_cost

print("== simulator ==")
sim_speed.main([])
print("== UNICAST3 processing cost ==")
unicast3_cost.main([])
