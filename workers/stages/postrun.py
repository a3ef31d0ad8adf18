"""POSTRUN: turn the completions the proxy captured into a trajectory with the session's builder.

Runs in a prefork pool: building is CPU work (token lists of whole sessions), kept apart from
the threads that wait on agents and runtimes.
"""

from __future__ import annotations

import time

from pipeline import builders, keys
from pipeline.codec import pack, unpack
from pipeline.leases import StageLease
from pipeline.schemas import CompletionRecord, Trajectory
from pipeline.sessions import SessionState
from pipeline.status import Outcome, SessionStatus, Stage
from workers.stages.common import Deps, Skip, log


def body(d: Deps, state: SessionState, lease: StageLease) -> Stage | None:
    sid, spec = state.session_id, state.spec
    if state.status != SessionStatus.POSTRUN:
        raise Skip(f"status is {state.status.value}")
    d.sessions.stamp(sid, "postrun_started_at")
    _drain_inflight(d, sid)
    outcome = d.sessions.set_outcome(sid, Outcome.ERROR, "no outcome recorded")  # keeps an existing one
    records, bad = load_completions(d, sid)
    try:
        builder = builders.create(spec.builder.strategy, spec.builder.config)
        ctx = builders.BuildContext(sid, spec.task_id, spec.agent.harness, spec.metadata)
        trajectory = builder.build(records, ctx)
    except Exception as exc:
        log.warning("postrun %s: build failed: %s", sid, exc)
        trajectory = Trajectory(error=f"build failed: {exc}")  # EVALUATE turns this into ERROR
    trajectory.status = outcome.terminal_status()
    trajectory.metadata.update({"completions": len(records), "unreadable_records": bad,
                                "builder": spec.builder.strategy})
    d.r.set(keys.session_trajectory(sid), pack(trajectory), ex=d.settings.result_ttl_seconds)
    d.sessions.transition(sid, SessionStatus.EVALUATING, expected=[SessionStatus.POSTRUN],
                          postrun_ended_at=time.time())
    return Stage.EVALUATE


def load_completions(d: Deps, sid: str) -> tuple[list[CompletionRecord], int]:
    records, bad = [], 0
    for blob in d.r.lrange(keys.session_completions(sid), 0, -1):
        try:
            records.append(CompletionRecord.model_validate(unpack(blob)))
        except Exception:  # a corrupt record is counted, never silently trained on
            bad += 1
    return records, bad


def _drain_inflight(d: Deps, sid: str) -> None:
    """Give model calls still inside the proxy a moment to land their records."""
    deadline = time.monotonic() + d.settings.inflight_drain_seconds
    while time.monotonic() < deadline:
        if int(d.r.get(keys.session_inflight(sid)) or 0) <= 0:
            return
        time.sleep(0.05)
