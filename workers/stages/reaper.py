"""The reaper: finds stages whose worker died and sends them again.

Celery gives a late-acked message back only after the visibility timeout (hours, by design:
see ``pipeline/celery_app.py``), and a killed process group (OOM, node loss) acks nothing. A
session would sit there. Every stage holds a heartbeated lease while it runs; the reaper looks
at active sessions whose current stage was started but whose lease has expired, and dispatches
that stage again. The redelivered task takes the stage's *recovery* path (``common.run_stage``):
INIT and RUN end the session as ERROR with what was captured (an agent never runs twice),
the other stages simply run again. One pass at a time across all workers (a Redis lock).
"""

from __future__ import annotations

import threading
import time

from pipeline.celery_app import dispatch
from pipeline.status import Stage
from pipeline.stores.leases import live_leases, try_reaper_pass
from workers.stages.common import Deps, deps, log, stage_for


def stalled(d: Deps) -> list[tuple[str, Stage]]:
    """(session, stage) pairs whose stage was started, is not done, and has no live lease."""
    sessions = d.stores.sessions
    sids = sessions.active()
    if not sids:
        return []
    candidates: list[tuple[str, Stage]] = []
    for sid, progress in zip(sids, sessions.progress(sids)):
        if progress is None:  # expired: nothing left to reap
            sessions.retire(sid)
            continue
        # Terminal: CALLBACK, if not done yet.
        stage = stage_for(progress.status, Stage.EVALUATE in progress.done)
        if stage is not None and stage in progress.started and stage not in progress.done:
            candidates.append((sid, stage))
    if not candidates:
        return []
    return [c for c, alive in zip(candidates, live_leases(d.stores.r, candidates)) if not alive]


def reap_once(d: Deps) -> list[tuple[str, Stage]]:
    if not try_reaper_pass(d.stores.r, d.settings.reaper_interval_seconds):
        return []  # another worker's reaper has this round
    found = stalled(d)
    for sid, stage in found:
        log.warning("reaper: %s of %s lost its worker; dispatching it again", stage.value, sid)
        dispatch(d.app, stage, sid)
    return found


def start(interval: float | None = None) -> threading.Thread:
    def loop() -> None:
        d = deps()
        period = interval or d.settings.reaper_interval_seconds
        while True:
            time.sleep(period)
            try:
                reap_once(d)
            except Exception:  # a transient Redis error must not kill the reaper
                log.exception("reaper pass failed")

    thread = threading.Thread(target=loop, name="polar-reaper", daemon=True)
    thread.start()
    return thread
