"""The `chaosbed` command line: `main.py` holds the `main` group and adds the commands, one module per command group
(cluster, compose, demo, fault, matrix, run, sim, spark, stacks); options.py and output.py are what they share."""
