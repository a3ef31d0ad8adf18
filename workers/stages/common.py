"""What every stage shares: per-process dependencies and the redelivery-safe stage wrapper.

``run_stage`` gives each (session, stage) these guarantees, whatever Celery delivers:
  * two live copies never run at once (a stage lease with a heartbeat);
  * a stage that finished is never run again: a redelivered copy only re-sends the next stage
    (which is guarded the same way), covering a crash between "done" and "dispatch";
  * a stage whose worker died mid-way is *recovered*, not blindly re-run: stages with side
    effects outside Redis (INIT, RUN) fail the session to POSTRUN instead of running the agent
    a second time.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from celery import Celery

from pipeline.celery_app import make_app
from pipeline.dispatch import Dispatcher
from pipeline.errors import LeaseLost
from pipeline.registry import allow_plugin_modules
from pipeline.settings import Settings
from pipeline.status import SessionStatus, Stage
from pipeline.stores import Stores, stage_metrics
from pipeline.stores.connection import connect
from pipeline.stores.leases import StageLease
from pipeline.stores.sessions import SessionState
from pipeline.stores.stage_runs import Handoff

log = logging.getLogger("polar.stages")


class Skip(Exception):
    """The stage has nothing to do for this session (already handled elsewhere)."""


class Rerun(Exception):
    """Raised by a recovery: the dead worker left nothing behind, run the stage from the start."""


@dataclass(frozen=True)
class Deps:
    """What a stage needs: settings, the stores (the only way to Redis), the Celery app and the
    dispatcher that sends the next stage."""

    settings: Settings
    stores: Stores
    app: Celery
    dispatcher: Dispatcher


@functools.lru_cache(maxsize=None)
def _deps_for(pid: int) -> Deps:
    return make_deps(Settings.from_env())


def make_deps(settings: Settings) -> Deps:
    allow_plugin_modules(settings.plugin_module_list)
    r, app = connect(settings), make_app(settings)
    stores = Stores.open(r, settings)
    return Deps(settings, stores, app, Dispatcher(app, stores.stage_runs))


def deps() -> Deps:
    return _deps_for(os.getpid())  # forked pool children get their own connections


Body = Callable[[Deps, SessionState, StageLease], "Stage | Handoff | None"]
Recover = Callable[[Deps, SessionState], "Stage | Handoff | None"]
# What a stage's body reads first, queued on the begin's round trip (``StageRuns.begin``'s
# ``reads``): ``(deps, pipeline, session id)``. The replies reach the body as ``state.read``
# (None when the stage began without them: the body then reads them itself). Registered by the
# stage's module; only data nobody changes once the stage's message is sent.
Reads = Callable[[Deps, Any, str], None]
BEGIN_READS: dict[Stage, Reads] = {}
# Stages whose start is stamped by the guard as it begins them (the others stamp theirs with the
# status they move the session to).
START_STAMPS = {Stage.POSTRUN: "postrun_started_at", Stage.EVALUATE: "evaluate_started_at"}


def run_stage(stage: Stage, session_id: str, body: Body, recover: Recover | None = None,
              d: Deps | None = None) -> str:
    d = d or deps()
    runs = d.stores.stage_runs
    started = time.monotonic()
    # One round trip: the lease, the session, the "started" mark (and the stage's start stamp).
    begun = runs.begin(session_id, stage, START_STAMPS.get(stage), _begin_reads(d, stage, session_id))
    if begun is None:
        log.info("%s %s: another worker holds this stage; duplicate delivery dropped", stage.value, session_id)
        stage_metrics.count_stage_run(d.stores.r, stage, "duplicate")
        return "duplicate"
    lease, state = begun.lease, begun.state
    stamp = START_STAMPS.get(stage)
    if state is not None and stamp and getattr(state.timing, stamp) is None:
        setattr(state.timing, stamp, begun.stamped_at)  # what the begin script just wrote
    if state is not None:
        state.read = begun.read
    try:
        if state is None:
            log.warning("%s %s: unknown or expired session", stage.value, session_id)
            runs.finish(lease, session_id, result="missing")
            return "missing"
        if stage in state.done:
            runs.finish(lease, session_id, send=state.done[stage], result="already-done")
            return "already-done"
        end: Stage | Handoff | None = None
        rerun = recover is None or stage not in state.started
        if not rerun:
            log.warning("%s %s: previous worker died mid-stage; recovering", stage.value, session_id)
            try:
                end = recover(d, state) or _pending_after(d, stage, session_id)  # type: ignore[misc]
            except Rerun:
                rerun = True
        if rerun:
            try:
                end = body(d, state, lease)
            except Skip as why:
                log.info("%s %s: skipped (%s)", stage.value, session_id, why)
                # A worker that died between a status write and its "done" marker left the
                # session waiting for a later stage nobody sent: send it (it is guarded too).
                runs.finish(lease, session_id, send=_pending_after(d, stage, session_id), result="skipped",
                            seconds=time.monotonic() - started)
                return "skipped"
        # The session's move, where this stage sent it (for a redelivered copy to repeat), the
        # next stage's message and the lease, in one atomic step.
        runs.finish(lease, session_id, done=stage, handoff=end if isinstance(end, Handoff) else Handoff(end),
                    seconds=time.monotonic() - started)
        return "done"
    except LeaseLost as lost:
        # Stalled past the lease (a stopped or starved worker) while another copy took over: that
        # copy does the stage; this one wrote nothing and steps aside.
        log.warning("%s %s: %s", stage.value, session_id, lost)
        stage_metrics.count_stage_run(d.stores.r, stage, "lease-lost", time.monotonic() - started)
        return "lease-lost"
    except BaseException:
        # Crashed (Redis gone for longer than the client retries, a bug, a refused move): keep
        # the lease unreleased so it lapses and the reaper sends the stage again, into its
        # recovery path, instead of the session waiting for a message nobody will send.
        lease.stop_heartbeat()
        stage_metrics.count_stage_run(d.stores.r, stage, "failed", time.monotonic() - started)
        raise


def first_reads(d: Deps, stage: Stage, session_id: str, read: list[Any] | None) -> list[Any]:
    """The replies to ``stage``'s ``BEGIN_READS``: ``read`` when the begin brought them, else read
    now in a round trip of their own."""
    if read is not None:
        return read
    pipe = d.stores.r.pipeline(transaction=False)
    BEGIN_READS[stage](d, pipe, session_id)
    return list(pipe.execute())


def _begin_reads(d: Deps, stage: Stage, session_id: str) -> Callable[[Any], None] | None:
    reads = BEGIN_READS.get(stage)
    if reads is None:
        return None
    return lambda pipe: reads(d, pipe, session_id)


_ORDER = list(Stage)


def stage_for(status: SessionStatus, evaluated: bool) -> Stage | None:
    """The stage that acts on a session in ``status`` (``evaluated``: its result is stored)."""
    if status == SessionStatus.EVALUATING:
        return Stage.CALLBACK if evaluated else Stage.EVALUATE
    if status.is_terminal():
        return Stage.CALLBACK
    return _STAGE_OF.get(status)


_STAGE_OF = {SessionStatus.REGISTERED: Stage.INIT, SessionStatus.INITIALIZING: Stage.INIT,
             SessionStatus.READY: Stage.RUN, SessionStatus.RUNNING: Stage.RUN,
             SessionStatus.POSTRUN: Stage.POSTRUN}
# Statuses in which a session waits for a stage *message* (no worker holds it).
_HANDED_OFF = (SessionStatus.READY, SessionStatus.POSTRUN, SessionStatus.EVALUATING)


def _pending_after(d: Deps, stage: Stage, session_id: str) -> Stage | None:
    """The later stage the session's current status is waiting for, if any."""
    status = d.stores.sessions.status(session_id)
    if status not in _HANDED_OFF:
        return None
    owner = stage_for(status, d.stores.outputs.has_result(session_id))
    if owner is not None and _ORDER.index(owner) > _ORDER.index(stage):
        return owner
    return None


