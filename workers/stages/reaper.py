"""The reaper: sends again what was lost with a dead process.

Celery gives a late-acked message back only after the visibility timeout (hours, by design:
see ``pipeline/celery_app.py``), and a killed worker (OOM, node loss) acks nothing. Every stage
holds a heartbeated lease while it runs (``pipeline/stores/leases.py``); the reaper takes the
leases whose holder stopped renewing and dispatches their stage again. The redelivered task takes
the stage's *recovery* path (``common.run_stage``): INIT and RUN end the session as ERROR with
what was captured (an agent never runs twice), the other stages simply run again, and a stage
that had finished only re-sends the next one. Messages sent but never started -- a submission
stored by an API that died before dispatching, a message a worker fetched and died with -- are
sent again once their queue shows they are not waiting in it; overdue callback deliveries too.
One pass at a time across all workers (a Redis lock); each pass costs O(what was lost), however
many sessions are live. Every worker also sweeps leftover session directories and containers on its host.
"""

from __future__ import annotations

import threading
import time

from pipeline import results_dir
from pipeline.messages import init_priority
from pipeline.status import SessionStatus, Stage
from pipeline.stores.leases import sent_before, take_expired, take_grace_seconds, try_prune_pass, try_reaper_pass
from pipeline.stores.queues import queue_depths, queued
from workers.runtimes import RuntimeHost, sweeper
from workers.stages import artifacts
from workers.stages.common import Deps, deps, log

# A message waits in its queue (or has just been fetched) this long before its absence from an
# empty queue means it was lost; in a busy queue, the queue itself is searched after SCAN_AFTER.
SENT_GRACE_SECONDS = 20.0
SENT_SCAN_AFTER_SECONDS = 300.0
CALLBACK_LATE_SECONDS = 15.0  # Celery's own retry fires when a delivery is due; later, it was lost


ARTIFACTS_PRUNE_SECONDS = 600.0  # old artifacts are looked for at most this often
_artifacts_pruned = [0.0]
_index_walked = [time.time()]  # (the first whole walk of the results index a day after the worker starts)
INDEX_WALK_SECONDS = 86400.0


def sweep(d: Deps) -> list[str]:
    """This host's leftover session directories, processes and containers (every worker, every
    pass), and artifact folders and results files past ``artifacts_keep_days`` and
    ``results_keep_days`` (every ten minutes)."""
    now = time.time()
    # One worker of each host prunes (the folders are the host's, or shared): five had each
    # walked them every ten minutes.
    if now - _artifacts_pruned[0] > ARTIFACTS_PRUNE_SECONDS and try_prune_pass(d.stores.r, ARTIFACTS_PRUNE_SECONDS):
        _artifacts_pruned[0] = now
        artifacts.remove_old(d.settings.home, d.settings.artifacts_keep_days * 86400, now)
        whole_index = now - _index_walked[0] > INDEX_WALK_SECONDS
        if whole_index:
            _index_walked[0] = now
        gone = results_dir.remove_old(d.settings.results_path, d.settings.results_keep_days * 86400, now,
                                      whole_index=whole_index)
        if gone:
            log.info("reaper: pruned %d results files older than %s days", gone, d.settings.results_keep_days)
    return sweeper.sweep(RuntimeHost.of(d.settings), d.stores.sessions.status)


def reap_once(d: Deps) -> list[tuple[str, Stage]]:
    """One pass: returns the (session, stage) pairs it dispatched again; then this host's sweep
    (after: a slow sweep -- a container engine that does not answer -- never holds up recovery)."""
    try:
        return _reap(d)
    finally:
        sweep(d)


def _reap(d: Deps) -> list[tuple[str, Stage]]:
    if not try_reaper_pass(d.stores.r, d.settings.reaper_interval_seconds):
        return []  # another worker's reaper has this round
    found: list[tuple[str, Stage]] = []
    grace = d.settings.lease_take_grace_seconds
    for sid, stage in take_expired(d.stores.r, take_grace_seconds(d.settings.stage_lease_seconds) if grace is None
                                   else grace):
        log.warning("reaper: %s of %s lost its worker; dispatching it again", stage.value, sid)
        if stage == Stage.INIT:
            free_ready_slot(d, sid)
        resend(d, stage, sid)
        found.append((sid, stage))
    found += _lost_messages(d)
    for task_id in d.stores.callbacks.due(CALLBACK_LATE_SECONDS):
        log.warning("reaper: the callback of task %s is overdue (its worker died?); sending it again", task_id)
        d.dispatcher.callback(task_id)
    return found


def free_ready_slot(d: Deps, sid: str) -> None:
    """A lost INIT that had taken its READY slot (INITIALIZING) gives the slot back now, not when
    its recovery runs: the recovery message waits in the INIT queue behind INITs that wait for a
    slot, holding every INIT worker; had the lost sessions kept the buffer full, nothing would
    move until the slots expired (the session budget + READY_GRACE_SECONDS: an hour's budget
    stalled INIT for an hour). The lease is the reaper's now, so the old holder can no longer
    move the session to READY; its runtime lives until the recovery's POSTRUN tears it down."""
    if d.stores.sessions.status(sid) == SessionStatus.INITIALIZING:
        d.stores.ready.release(sid)


def resend(d: Deps, stage: Stage, sid: str) -> None:
    """An INIT message goes back with its task's dispatch_priority (a lost one must not jump
    the queue); the others carry none."""
    priority = None
    if stage == Stage.INIT:
        state = d.stores.sessions.get(sid)
        priority = init_priority(state.spec.dispatch_priority) if state is not None else None
    d.dispatcher.send(stage, sid, priority)


def _lost_messages(d: Deps) -> list[tuple[str, Stage]]:
    r, now = d.stores.r, time.time()
    overdue = sent_before(r, now - SENT_GRACE_SECONDS)
    if not overdue:
        return []
    depth = queue_depths(r, {stage.queue for _, stage, _ in overdue})
    found = []
    for sid, stage, sent_at in overdue:
        if depth[stage.queue]:
            # A backlog: the message may be waiting in it. Look, but only for old ones.
            if now - sent_at < SENT_SCAN_AFTER_SECONDS or queued(r, stage.queue, sid) is not False:
                continue
        log.warning("reaper: %s of %s was sent %.0fs ago and never started; sending it again", stage.value, sid,
                    now - sent_at)
        resend(d, stage, sid)
        found.append((sid, stage))
    return found


def start(interval: float | None = None) -> threading.Thread:
    def loop() -> None:
        d = deps()
        period = interval or d.settings.reaper_interval_seconds
        try:
            sweep(d)  # what a previous worker or stack on this host left behind
        except Exception:
            log.exception("sweeping at start failed")
        while True:
            time.sleep(period)
            try:
                reap_once(d)
            except Exception:  # a transient Redis error must not kill the reaper
                log.exception("reaper pass failed")

    thread = threading.Thread(target=loop, name="polar-reaper", daemon=True)
    thread.start()
    return thread
