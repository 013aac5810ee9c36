"""An OSError that the machine caused (a full disk, a port taken, a peer gone, a missing privilege) in one sentence
that says what to do: what `chaosbed` prints instead of a traceback (orchestration/cli/errors.py) and what a run that
could not finish reports (orchestration/runner.py)."""

from __future__ import annotations

import errno

# OSError numbers that say the machine, not chaosbed's code, is the cause, and what to do about each
_OS_HINTS = {
    errno.ENOSPC: "the disk is full: free some space and run it again",
    errno.EDQUOT: "the disk quota is used up: free some space and run it again",
    errno.EROFS: "the file system is read-only: write somewhere else (--out)",
    errno.EADDRINUSE: "an address or port is taken by another program: stop it, or let chaosbed pick another",
    errno.ECONNREFUSED: "nothing answers there any more (a member, the Spark service or an engine that stopped)",
    errno.ECONNRESET: "the other side went away (a member, the Spark service or an engine that stopped)",
    errno.EPIPE: "the other side went away (a member, the Spark service or an engine that stopped)",
    errno.ETIMEDOUT: "the other side did not answer in time",
    errno.EHOSTUNREACH: "the address cannot be reached (its namespace or network went away?)",
    errno.ENETUNREACH: "the network cannot be reached (its namespace or network went away?)",
    errno.EACCES: "permission denied: run as root, or with the privilege this needs",
    errno.EPERM: "operation not permitted: run as root, or with the privilege this needs",
    errno.ENOENT: "a file or folder is missing (removed from another shell?)",
}


def os_problem(e: OSError) -> str | None:
    """The sentence for an OSError of the machine (None: one this module does not know, maybe a bug)."""
    hint = _OS_HINTS.get(e.errno) if e.errno is not None else None
    if hint is None:
        return None
    where = f" ({e.filename})" if e.filename else ""
    return f"{e.strerror or e}{where}: {hint}"
