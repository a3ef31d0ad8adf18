"""Prepare actions: what INIT (and the evaluation runtime's warm-up) runs in a fresh runtime
before the agent -- commands, retried when a task asks for it, and uploads from the allowed host
folders only (``pipeline/upload_policy.py``)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Sequence

from pipeline.schemas import PrepareAction
from pipeline.status import Outcome
from pipeline.upload_policy import upload_problem
from workers.runtimes import Runtime


class StepFailed(Exception):
    def __init__(self, outcome: Outcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


def run_prepare(runtime: Runtime, actions: Sequence[PrepareAction], *, deadline: float,
                cancelled: Callable[[], bool], upload_roots: list[Path], upload_excluded: Sequence[Path],
                label: str = "prepare", upload_max_bytes: int | None = None) -> None:
    for index, action in enumerate(actions):
        if action.type == "exec":
            _exec(runtime, action, f"{label}[{index}]", f"{label}.{index:02d}", deadline, cancelled)
        else:
            _upload(runtime, action, f"{label}[{index}]", upload_roots, upload_excluded, upload_max_bytes)


def _exec(runtime: Runtime, action: PrepareAction, where: str, log_name: str, deadline: float,
          cancelled: Callable[[], bool]) -> None:
    for attempt in range(1, action.max_attempts + 1):
        remaining = deadline - time.time()
        if remaining <= 0:
            raise StepFailed(Outcome.TIMEOUT, f"time budget used up before {where}")
        timeout = min(remaining, action.timeout_seconds or remaining)
        res = runtime.exec(action.command or "", cwd=action.cwd, env=action.env, timeout=timeout,
                           should_cancel=cancelled, log_name=log_name if attempt == 1 else f"{log_name}.try{attempt}")
        if res.cancelled:
            raise StepFailed(Outcome.CANCELLED, f"cancelled during {where}")
        if res.ok:
            return
        if res.timed_out and timeout >= remaining:
            raise StepFailed(Outcome.TIMEOUT, f"{where} ran out the session's time budget")
        if attempt == action.max_attempts:
            detail = f"timed out after {timeout:.0f}s" if res.timed_out else f"exited {res.exit_code}: {res.stderr[-500:]}"
            tries = f" (after {attempt} attempts)" if attempt > 1 else ""
            raise StepFailed(Outcome.ERROR, f"{where} {detail}{tries}")
        time.sleep(min(action.retry_backoff_seconds, max(0.0, deadline - time.time())))


def _upload(runtime: Runtime, action: PrepareAction, where: str, roots: list[Path],
            excluded: Sequence[Path], max_bytes: int | None) -> None:
    src = action.src or ""
    why = upload_problem(src, roots, excluded)
    if why:
        raise StepFailed(Outcome.ERROR, f"{where}: {src!r} {why}")
    if not Path(src).exists():
        raise StepFailed(Outcome.ERROR, f"{where}: {src} does not exist")
    if (action.type == "upload_dir") != Path(src).is_dir():
        raise StepFailed(Outcome.ERROR, f"{where}: {src} is {'not ' if action.type == 'upload_dir' else ''}a folder")
    if max_bytes is not None and _size_over(Path(src), max_bytes):
        raise StepFailed(Outcome.ERROR, f"{where}: {src} holds more than {max_bytes / 2**20:g} MB "
                                        "(POLAR_UPLOAD_MAX_MB): upload less, or build it into the runtime's image")
    runtime.upload(src, action.dst or "")


def _size_over(path: Path, limit: int) -> bool:
    """Whether ``path`` (a file, or a folder counted whole, links not followed) holds more than
    ``limit`` bytes; stops counting as soon as it does."""
    if not path.is_dir():
        return path.stat().st_size > limit
    total, stack = 0, [str(path)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
                    if total > limit:
                        return True
    return False
