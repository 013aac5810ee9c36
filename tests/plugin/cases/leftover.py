"""A process that carries the cluster's label outlives the test: the plugin's teardown check must fail the test."""

import os
import subprocess
import sys

import pytest


@pytest.mark.chaosbed(members=2, stack="unicast3", backend="sim")
def test_leaves_a_process(chaos_cluster):
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; time.sleep(float(sys.argv[1]))", "300", chaos_cluster.label]
    )
    with open(os.environ["CASE_FACTS"], "w") as f:
        f.write(str(sleeper.pid))
