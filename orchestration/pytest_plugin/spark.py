"""The warm Spark service as a test session sees it: the plugin's session hooks start nothing themselves (the first
check does) and stop what their session started."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from analysis.spark_service import ServiceInfo


class SparkService(Protocol):
    """What the session hooks use of the module analysis.spark_service."""

    def status(self) -> ServiceInfo | None: ...

    def service_dir(self) -> Path: ...

    def stop(self) -> bool: ...


def spark_service() -> SparkService | None:
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
