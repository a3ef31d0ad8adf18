"""POSTRUN: turn the completions the proxy captured into a trajectory with the session's builder.

Runs in a prefork pool: building is CPU work (token lists of whole sessions), kept apart from
the threads that wait on agents and runtimes.
"""

from __future__ import annotations

import time
from collections import Counter

from pipeline import builders
from pipeline.schemas import Trajectory
from pipeline.status import Outcome, SessionStatus, Stage
from pipeline.stores.leases import StageLease
from pipeline.stores.sessions import SessionState
from workers.stages.common import Deps, Skip, log

INFLIGHT_POLL_SECONDS = 0.05


def body(d: Deps, state: SessionState, lease: StageLease) -> Stage | None:
    sid, spec, sessions = state.session_id, state.spec, d.stores.sessions
    if state.status != SessionStatus.POSTRUN:
        raise Skip(f"status is {state.status.value}")
    sessions.stamp(sid, "postrun_started_at")
    _drain_inflight(d, sid)
    outcome = sessions.set_outcome(sid, Outcome.ERROR, "no outcome recorded")  # keeps an existing one
    records, bad = d.stores.records.completions(sid)
    try:
        builder = builders.create(spec.builder.strategy, spec.builder.config)
        ctx = builders.BuildContext(sid, spec.task_id, spec.agent.harness, spec.metadata)
        trajectory = builder.build(records, ctx)
    except Exception as exc:
        log.warning("postrun %s: build failed: %s", sid, exc)
        trajectory = Trajectory(error=f"build failed: {exc}")  # EVALUATE turns this into ERROR
    trajectory.status = outcome.terminal_status()
    errors = d.stores.records.errors(sid)
    trajectory.metadata.update({"completions": len(records), "unreadable_records": bad,
                                "builder": spec.builder.strategy, **call_errors(errors)})
    if not records and outcome == Outcome.COMPLETED and not trajectory.error:
        # An agent that exits 0 without one model call did not do the task (misconfigured CLI,
        # wrong base URL): never a COMPLETED session with nothing to train on.
        trajectory.error = "no completions captured: the agent made no model call through the proxy"
    d.stores.outputs.save_trajectory(sid, trajectory)
    sessions.transition(sid, SessionStatus.EVALUATING, expected=[SessionStatus.POSTRUN],
                        postrun_ended_at=time.time())
    return Stage.EVALUATE


def call_errors(errors: list) -> dict:
    """The model calls that failed, by error type, and the last one's cause (for the result)."""
    if not errors:
        return {}
    last = max(errors, key=lambda e: e.finished_at or 0)
    return {"proxy_errors": dict(Counter(e.error_type for e in errors)),
            "last_proxy_error": f"{last.status_code} {last.error_type}: {last.message[:500]}"}


def _drain_inflight(d: Deps, sid: str) -> None:
    """Give model calls still inside the proxy a moment to land their records."""
    deadline = time.monotonic() + d.settings.inflight_drain_seconds
    while time.monotonic() < deadline:
        if d.stores.sessions.inflight_calls(sid) <= 0:
            return
        time.sleep(INFLIGHT_POLL_SECONDS)
