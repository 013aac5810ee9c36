"""Matrices (docs/scenario-format.md "Matrices"): matrix files expanded into cells (spec), each cell run as `chaosbed
run` in a process of its own (run, cell), one check pass over all of them and the grid report (report); the known-bug
catalogue (bugs) runs as a matrix too."""
