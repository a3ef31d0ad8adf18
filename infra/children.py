"""The stack's child processes (``infra/stack.py``): ``Child`` (a started service: its command,
process, log, restarts), stopping children by process group (signalled, waited for, what
outlives the wait killed), and killing the agents a local runtime left behind. Kept apart from
``stack`` so starting and supervising the services is read there, how processes end here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from workers.runtimes.local import kill_recorded_groups


@dataclass
class Child:
    name: str
    args: list[str]
    proc: subprocess.Popen
    log_path: Path
    started: float = field(default_factory=time.monotonic)
    restarts: int = 0
    restart_at: float | None = None  # when a dead child is due to start again


def _stop_all(children: list["Child"], sig: signal.Signals, seconds: float) -> None:
    """Signal every child's process group, then wait for them; what outlives ``seconds`` is killed."""
    for child in reversed(children):
        if child.proc.poll() is None:
            _signal_group(child.proc, sig)
    deadline = time.monotonic() + seconds
    for child in children:
        try:
            child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(child.proc, signal.SIGKILL)
            child.proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_runtime_processes(runtime_root: Path) -> int:
    """Kill every process group a local runtime recorded (agents outliving a killed worker):
    only the sessions' own (``kill_recorded_groups``), never through a link a session left."""
    if not runtime_root.is_dir():
        return 0
    return sum(kill_recorded_groups(session.resolve()) for session in runtime_root.iterdir()
               if session.is_dir() and not session.is_symlink())
