"""The warm Spark service as a test session sees it: the plugin's session hooks start nothing themselves (the first
check does) and stop what their session started."""

from __future__ import annotations

from typing import Any


def spark_service() -> Any:
    """analysis.spark_service (standard library only at import), or None where chaosbed lacks it."""
    try:
        from analysis import spark_service
    except ImportError:
        return None
    return spark_service


def spark_pid() -> int | None:
    """The pid of the running warm Spark service of this state root, or None."""
    service = spark_service()
    info = service.status() if service is not None else None
    return info.pid if info is not None else None
