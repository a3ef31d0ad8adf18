"""The sweeper: what sessions that are over (or gone) left behind on this host -- session
directories with the processes they started, and containers -- removed. A worker killed
mid-session, or a whole stack lost, leaves them; every worker sweeps its host when it starts
and with every reaper pass, and ``polar runtimes sweep`` does it by hand.

A runtime is left alone while its session is live (its own stages tear it down) and for
``MIN_AGE_SECONDS`` after it was made (INIT may be creating it right now). The evaluation
runtime ``S.eval`` belongs to session ``S``.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Callable

from pipeline.status import SessionStatus
from workers.runtimes.base import MARKER_SUFFIXES, RuntimeHost, owner_session
from workers.runtimes.local import kill_session_processes

log = logging.getLogger("polar.sweeper")
MIN_AGE_SECONDS = 30.0
# The longest the sweep waits for the container engine (never longer than the runtime's own
# ``docker_call_timeout``): it runs on every worker's reaper thread, ahead of nothing else but
# still every pass, and a hung engine (not a gone one: that refuses at once) held each pass for
# the client's 120 s.
ENGINE_TIMEOUT_SECONDS = 10.0
StatusOf = Callable[[str], "SessionStatus | None"]


def _over(status_of: StatusOf, name: str) -> bool:
    status = status_of(owner_session(name))
    return status is None or status.is_terminal()


def sweep_local(runtime_root: Path, status_of: StatusOf, min_age: float | None = None) -> list[str]:
    """Remove the directories (and kill the processes) of sessions that are over; returns them."""
    if not runtime_root.is_dir():
        return []
    removed, now = [], time.time()
    min_age = MIN_AGE_SECONDS if min_age is None else min_age
    for root in sorted(runtime_root.iterdir()):
        # (What was listed may be gone by now: a session's own teardown removes its folder and
        # markers while the sweep runs. That one is not the sweep's any more; the rest still is.)
        suffix = next((x for x in MARKER_SUFFIXES if root.name.endswith(x)), None)
        try:
            if suffix and not root.is_dir():  # a marker beside a folder its stop left
                if now - root.lstat().st_mtime >= min_age and _over(status_of, root.name[:-len(suffix)]):
                    root.unlink(missing_ok=True)
                continue
            if not root.is_dir() or now - root.stat().st_mtime < min_age or not _over(status_of, root.name):
                continue
        except FileNotFoundError:
            continue
        killed = kill_session_processes(root.resolve())
        shutil.rmtree(root, ignore_errors=True)
        log.warning("sweeper: removed %s (%d processes killed)", root, killed)
        removed.append(root.name)
    return removed


def engine_configured(docker_host: str | None) -> bool:
    """Whether this host has a container engine to sweep (without one, nothing to ask)."""
    return bool(docker_host or os.environ.get("DOCKER_HOST") or Path("/var/run/docker.sock").exists())


def sweep_containers(host: RuntimeHost, status_of: StatusOf, min_age: float | None = None) -> list[str]:
    """Remove the containers of sessions that are over; returns their names."""
    from workers.runtimes import docker

    removed, now = [], time.time()
    min_age = MIN_AGE_SECONDS if min_age is None else min_age
    wait = min(ENGINE_TIMEOUT_SECONDS, host.docker_call_timeout)
    for name, session, created in docker.session_containers(host.docker_host, host.root, wait):
        if now - created < min_age or not _over(status_of, session):
            continue
        docker.remove_container(host.docker_host, name, wait)
        log.warning("sweeper: removed container %s (session %s)", name, session)
        removed.append(name)
    return removed


def sweep(host: RuntimeHost, status_of: StatusOf, min_age: float | None = None) -> list[str]:
    """Everything at once: containers first (they hold their directories), then directories."""
    removed = []
    if engine_configured(host.docker_host):
        try:
            removed += sweep_containers(host, status_of, min_age)
        except Exception as exc:  # the engine is down: the directories are still ours to sweep
            log.warning("sweeper: cannot list containers: %s", exc)
    return removed + sweep_local(host.root, status_of, min_age)
