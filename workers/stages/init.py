"""INIT: wait for room in the READY buffer, start the runtime, run prepare actions and harness
setup, then park the session in READY. The session's time budget starts here."""

from __future__ import annotations

import time

from pipeline.errors import TransitionRefused
from pipeline.status import Outcome, SessionStatus, Stage
from pipeline.stores.leases import StageLease
from pipeline.stores.sessions import SessionState
from pipeline.stores.stage_runs import Handoff
from workers import harnesses, runtimes
from workers.harnesses import HarnessContext
from workers.stages.common import Deps, Rerun, Skip, log
from workers.stages.prepare import StepFailed, run_prepare

SLOT_WAIT_POLL_SECONDS = 0.2
READY_GRACE_SECONDS = 120  # a READY slot outlives the session budget by this much, then frees


def body(d: Deps, state: SessionState, lease: StageLease) -> Stage | Handoff:
    sid, spec = state.session_id, state.spec
    if state.status != SessionStatus.REGISTERED:
        raise Skip(f"status is {state.status.value}")
    slot_ttl = spec.timeout_seconds + READY_GRACE_SECONDS
    task_key = d.stores.tasks.key(spec.task_id)
    # The runtime's handle (making it starts nothing) is written with the admission's move, before
    # anything starts: a worker that dies from there on leaves POSTRUN what to tear down. One that
    # cannot be made fails the session once admitted, as a runtime that cannot start does.
    runtime: runtimes.Runtime | None = None
    unmade: Exception | None = None
    try:
        backend = spec.runtime.backend or d.settings.default_runtime_backend
        runtime = runtimes.create(spec.runtime.model_copy(update={"backend": backend}), sid,
                                  runtimes.RuntimeHost.of(d.settings, spec.task_id))
    except Exception as exc:
        unmade = exc
    made = {"runtime": runtime.handle} if runtime is not None else {}
    while True:  # backpressure: never run ahead of the buffer
        now = time.time()
        try:
            if d.stores.ready.admit(sid, task_key, slot_ttl, init_started_at=now, deadline=now + spec.timeout_seconds,
                                    **made):
                break
        except TransitionRefused as exc:
            raise Skip(str(exc)) from None
        if d.stores.sessions.status(sid) != SessionStatus.REGISTERED or lease.lost.is_set():
            raise Skip("cancelled or taken over while waiting for a READY slot")
        time.sleep(SLOT_WAIT_POLL_SECONDS)
    deadline = now + spec.timeout_seconds
    try:
        if runtime is None:
            raise unmade or RuntimeError("no runtime")
        runtime.start()
        cancelled = lambda: d.stores.sessions.cancel_requested(sid)  # noqa: E731
        run_prepare(runtime, spec.runtime.prepare, deadline=deadline, cancelled=cancelled,
                    upload_roots=d.settings.upload_root_list if spec.runtime.prepare else [],  # (resolving costs syscalls)
                    upload_excluded=d.settings.upload_excluded if spec.runtime.prepare else [],
                    upload_max_bytes=d.settings.upload_max_mb * 2**20)
        env = harnesses.harness_env(runtime.reachable_url(d.settings.proxy_url), spec, state.key or "")
        harnesses.create(spec.agent.harness or "shell").setup(runtime, HarnessContext(spec, env))
        if cancelled():
            raise StepFailed(Outcome.CANCELLED, "cancelled during init")
        if time.time() >= deadline:
            raise StepFailed(Outcome.TIMEOUT, "time budget used up during init")
    except Exception as exc:  # any failure here ends the session; POSTRUN tears down
        outcome = exc.outcome if isinstance(exc, StepFailed) else Outcome.ERROR
        log.warning("init %s failed: %s", sid, exc)
        d.stores.ready.release(sid)
        return Handoff(Stage.POSTRUN, SessionStatus.POSTRUN, (SessionStatus.INITIALIZING,),
                       outcome=outcome, error=f"init: {exc}")
    # Into READY (its list and slot), the move and RUN's message: one fenced step.
    return Handoff(Stage.RUN, SessionStatus.READY, (SessionStatus.INITIALIZING,), {"ready_at": time.time()},
                   ready_ttl=max(1.0, deadline - time.time()) + READY_GRACE_SECONDS)


def recover(d: Deps, state: SessionState) -> Stage | None:
    """The previous INIT worker died. Still REGISTERED (it was waiting for a READY slot): start
    over. INITIALIZING: the runtime is in an unknown state, fail the session (POSTRUN tears down)."""
    if state.status == SessionStatus.REGISTERED:
        raise Rerun()
    if state.status != SessionStatus.INITIALIZING:
        return None
    d.stores.sessions.set_outcome(state.session_id, Outcome.ERROR, "init worker lost")
    d.stores.ready.release(state.session_id)
    d.stores.sessions.transition(state.session_id, SessionStatus.POSTRUN, expected=[SessionStatus.INITIALIZING])
    return Stage.POSTRUN
