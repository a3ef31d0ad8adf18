"""The reaper: sends again what was lost with a dead process.

Celery gives a late-acked message back only after the visibility timeout (hours, by design:
see ``pipeline/celery_app.py``), and a killed worker (OOM, node loss) acks nothing. Every stage
holds a heartbeated lease while it runs (``pipeline/stores/leases.py``); the reaper takes the
leases whose holder stopped renewing and dispatches their stage again. The redelivered task takes
the stage's *recovery* path (``common.run_stage``): INIT and RUN end the session as ERROR with
what was captured (an agent never runs twice), the other stages simply run again, and a stage
that had finished only re-sends the next one. It also sends INIT for sessions whose submission
was stored but never dispatched (an API that died in between), and callback deliveries that
are overdue (a worker killed mid-POST, a lost retry). One pass at a time across all
workers (a Redis lock); each pass costs O(what was lost), however many sessions are live.
"""

from __future__ import annotations

import threading
import time

from pipeline.celery_app import dispatch, dispatch_callback
from pipeline.status import SessionStatus, Stage
from pipeline.stores.leases import take_expired, try_reaper_pass
from workers.stages.common import Deps, deps, log

UNDISPATCHED_GRACE_SECONDS = 10.0  # the API dispatches right after storing; this is a dead API
CALLBACK_LATE_SECONDS = 15.0  # Celery's own retry fires when a delivery is due; later, it was lost


def reap_once(d: Deps) -> list[tuple[str, Stage]]:
    """One pass: returns the (session, stage) pairs it dispatched again."""
    if not try_reaper_pass(d.stores.r, d.settings.reaper_interval_seconds):
        return []  # another worker's reaper has this round
    found: list[tuple[str, Stage]] = []
    for sid, stage in take_expired(d.stores.r):
        log.warning("reaper: %s of %s lost its worker; dispatching it again", stage.value, sid)
        dispatch(d.app, stage, sid)
        found.append((sid, stage))
    sessions = d.stores.sessions
    for sid in sessions.undispatched(UNDISPATCHED_GRACE_SECONDS):
        if sessions.status(sid) == SessionStatus.REGISTERED:
            log.warning("reaper: %s was stored but never dispatched; sending INIT", sid)
            dispatch(d.app, Stage.INIT, sid)
            found.append((sid, Stage.INIT))
        sessions.mark_dispatched([sid])
    for task_id in d.stores.callbacks.due(CALLBACK_LATE_SECONDS):
        log.warning("reaper: the callback of task %s is overdue (its worker died?); sending it again", task_id)
        dispatch_callback(d.app, task_id)
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
