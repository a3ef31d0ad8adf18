"""What a session leaves for a human to read: the agent's stdout and stderr, every step's logs,
the session's ``artifacts/`` folder and the harness's own transcripts (empty files left out),
copied out of the runtime before it is torn down to ``$POLAR_HOME/artifacts/<task>/<session>/`` (the result names it).

The session key is replaced by a mark in every copied text file: base URLs carry it, and some
CLIs write their config or request logs into their transcripts. (The key is dead once the
session ends; the copies are still never a place to find one.) A session keeps at most
``artifacts_max_mb``; what does not fit is listed in ``TRUNCATED.txt``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pipeline.results_dir import safe_name
from workers.runtimes.base import read_in
from workers.stages.common import log

REDACTED = "sk-polar-REDACTED"
SOURCES = ("logs", "artifacts")  # session-directory folders always kept


def folder_for(home: Path, task_id: str, session_id: str) -> Path:
    """Where a session's artifacts go: one safe folder name per id (as the results directory
    names them: never '.'/'..', and two ids that sanitise alike stay apart)."""
    return home / "artifacts" / safe_name(task_id) / safe_name(session_id)


def redact(data: bytes, secret: str) -> bytes:
    return data.replace(secret.encode(), REDACTED.encode()) if secret else data


def keep(session_root: Path, dest: Path, transcripts: tuple[str, ...], secret: str, max_bytes: int) -> Path | None:
    """Copy what the session left (see the module doc); returns ``dest``, or None when there was
    nothing. Links are not followed: a transcript folder cannot pull in files outside the session."""
    picks = [session_root / s for s in SOURCES] + [session_root / "home" / t for t in transcripts]
    # Empty files (an agent that printed nothing to stderr) tell nothing: not copied.
    files = [f for p in picks if p.is_dir() and not p.is_symlink() for f in sorted(p.rglob("*"))
             if f.is_file() and not f.is_symlink() and f.stat().st_size and _inside(f, session_root)]
    if not files:
        return None
    budget, skipped = max_bytes, []
    for f in files:
        size = f.stat().st_size
        if size > budget:
            skipped.append(f"{f.relative_to(session_root)} ({size} bytes)")
            continue
        target = dest / f.relative_to(session_root)
        try:
            # read as the worker reads any session file: a link or a pipe swapped in since the
            # listing (a container's process still runs) is refused, and no more than was listed
            data = read_in(f, size)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(redact(data, secret))
        except OSError as exc:
            log.warning("artifacts: cannot copy %s: %s", f, exc)
            continue
        budget -= size
    if skipped:
        (dest / "TRUNCATED.txt").write_text("over the artifacts budget, not copied:\n" + "\n".join(skipped) + "\n")
    return dest


def _inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())


def remove_old(home: Path, keep_seconds: float, now: float) -> int:
    """Delete session artifact folders older than ``keep_seconds``; returns how many."""
    base, removed = home / "artifacts", 0
    if not base.is_dir():
        return 0
    for task in base.iterdir():
        try:  # every worker's reaper prunes: another may remove (or fill) a folder under us
            for session in task.iterdir() if task.is_dir() else []:
                if now - session.stat().st_mtime > keep_seconds:
                    shutil.rmtree(session, ignore_errors=True)
                    removed += 1
            if task.is_dir() and not any(task.iterdir()):
                task.rmdir()
        except OSError:
            continue
    return removed
