"""Files replaced whole or not at all: a file written to a temporary name beside it, then renamed over it, so a
reader (or a second look after a full disk, a Ctrl-C or a kill) finds the old content or the new one, never half of
it. verdict.json, outcome.json, reports and the other documents of a run folder are written so."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, encoding: str = "utf-8") -> None:
    """Writes `data` to `path` through a temporary file in the same folder, renamed over `path` once complete; on
    any error the temporary file is removed and `path` is as it was."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode(encoding) if isinstance(data, str) else data)
        tmp.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
