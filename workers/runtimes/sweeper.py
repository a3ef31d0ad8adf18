"""The local sweeper: session directories (and the processes they started) whose session is
over or gone, removed. A worker killed mid-session, or a whole stack lost, leaves them behind;
every worker sweeps its host's runtime folder when it starts and with every reaper pass."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Callable

from pipeline.status import SessionStatus
from workers.runtimes.local import kill_session_processes

log = logging.getLogger("polar.sweeper")
MIN_AGE_SECONDS = 30.0  # a directory INIT is creating right now is never touched


def sweep_local(runtime_root: Path, status_of: Callable[[str], SessionStatus | None]) -> list[str]:
    """Remove the directories of sessions that are terminal or unknown; returns their ids."""
    if not runtime_root.is_dir():
        return []
    removed = []
    now = time.time()
    for root in sorted(runtime_root.iterdir()):
        if not root.is_dir() or now - root.stat().st_mtime < MIN_AGE_SECONDS:
            continue
        status = status_of(root.name)
        if status is not None and not status.is_terminal():
            continue  # live: its own stages tear it down
        killed = kill_session_processes(root.resolve())
        shutil.rmtree(root, ignore_errors=True)
        log.warning("sweeper: removed %s (session %s, %d processes killed)", root, status.value if status else "gone",
                    killed)
        removed.append(root.name)
    return removed
