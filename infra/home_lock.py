"""One running stack per ``$POLAR_HOME``.

Everything a stack keeps is in its home: the embedded Redis's append-only file, ``up.json``, the
tokens, the session folders its shutdown sweep kills the agents of. A second ``polar up`` (or a
``polar demo``) on the same home appended to the same Redis file from a second server, deleted the
first one's ``up.json`` and, stopping, killed the first one's agents. A stack now holds an
exclusive ``flock`` on ``$POLAR_HOME/stack.lock`` while it runs (the kernel drops it when the
process dies, kill -9 included: no stale lock to clean up), and one that cannot take it does not
start, naming the holder.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class HomeLockError(RuntimeError):
    """This ``$POLAR_HOME`` cannot be taken by a stack."""


class HomeInUse(HomeLockError):
    """Another running stack holds this ``$POLAR_HOME``."""


def claim_home(home: Path) -> int:
    """Take ``home``'s lock (an open descriptor: hold it while the stack runs; ``release`` it)."""
    try:
        fd = os.open(home / "stack.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:  # (a link in its place is not followed)
        raise HomeLockError(f"cannot take {home / 'stack.lock'}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise HomeInUse(f"POLAR_HOME={home} is in use by a running stack (`polar up` or `polar demo`, pid "
                        f"{holder}): stop it, or give this one its own POLAR_HOME") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def release(fd: int) -> None:
    os.close(fd)  # (closing the last descriptor drops the lock)
