"""A stack's service logs kept to a size: ``$POLAR_HOME/logs/<service>.log`` grew for as long
as the stack ran (about 1.5 kB a session across the workers' logs: gigabytes a week).

The services write their logs through a file descriptor opened for appending, which the
supervisor cannot swap under them; so a log over the limit is copied to ``<name>.log.1`` (the
older copies shifted to ``.2``, ... ``.KEEP``) and then truncated in place, as logrotate's
``copytruncate`` does. Appends carry on at the new end; what a service writes between the copy
and the truncation (a few milliseconds) is lost.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

KEEP = 3  # older copies kept beside each log


def rotate_if_large(path: Path, max_bytes: int, keep: int = KEEP) -> bool:
    """Rotate ``path`` when it holds more than ``max_bytes``; whether it did."""
    try:
        if path.is_symlink() or path.stat().st_size <= max_bytes:
            return False
    except FileNotFoundError:
        return False
    for n in range(keep - 1, 0, -1):
        older = path.with_name(f"{path.name}.{n}")
        if older.exists() and not older.is_symlink():
            os.replace(older, path.with_name(f"{path.name}.{n + 1}"))
    copy = path.with_name(f"{path.name}.1")
    # (never through a link planted where the copy goes: opened exclusively, after removing it)
    copy.unlink(missing_ok=True)
    fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(path, "rb") as src, os.fdopen(fd, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.truncate(path, 0)
    return True
