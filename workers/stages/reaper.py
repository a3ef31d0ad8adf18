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

from pipeline import keys
from pipeline.celery_app import dispatch
from pipeline.status import SessionStatus, Stage
from workers.stages.common import Deps, deps, log, stage_for


def stalled(d: Deps) -> list[tuple[str, Stage]]:
    """(session, stage) pairs whose stage was started, is not done, and has no live lease."""
    sids = d.sessions.active()
    if not sids:
        return []
    pipe = d.r.pipeline(transaction=False)
    for sid in sids:
        pipe.hmget(keys.session(sid), "status", *[f"started:{s.value}" for s in Stage],
                   *[f"done:{s.value}" for s in Stage])
    rows = pipe.execute()
    candidates: list[tuple[str, Stage]] = []
    for sid, row in zip(sids, rows):
        if row[0] is None:  # expired: nothing left to reap
            d.sessions.retire(sid)
            continue
        status = SessionStatus(row[0].decode())
        started = {s for s, v in zip(Stage, row[1:6]) if v}
        done = {s for s, v in zip(Stage, row[6:11]) if v}
        stage = stage_for(status, Stage.EVALUATE in done)  # terminal: CALLBACK, if not yet done
        if stage is not None and stage in started and stage not in done:
            candidates.append((sid, stage))
    if not candidates:
        return []
    pipe = d.r.pipeline(transaction=False)
    for sid, stage in candidates:
        pipe.exists(keys.session_lease(sid, stage.value))
    return [c for c, alive in zip(candidates, pipe.execute()) if not alive]


def reap_once(d: Deps) -> list[tuple[str, Stage]]:
    lock_ttl = max(1, int(d.settings.reaper_interval_seconds))
    if not d.r.set(keys.REAPER_LOCK, "1", nx=True, ex=lock_ttl):
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
