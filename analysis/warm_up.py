"""`python -m analysis.warm_up URL`: the pipeline's warm-up check on a new Spark Connect server, in a process of its
own. The Spark service runs it for a caller that brings no warm-up (analysis/spark_service.py `start`): that module
sits below the pipeline and does not import it."""

from __future__ import annotations

import sys

from analysis.pipeline import warm_up

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m analysis.warm_up sc://HOST:PORT")
    warm_up(sys.argv[1])
