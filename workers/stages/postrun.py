"""POSTRUN: turn the completions the proxy captured into a trajectory with the session's builder.

Runs in a prefork pool: building is CPU work (token lists of whole sessions), kept apart from
the threads that wait on agents and runtimes.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from pipeline import builders
from pipeline.schemas import Trajectory
from pipeline.status import Outcome, SessionStatus, Stage
from pipeline.stores.leases import StageLease
from pipeline.stores.records import SessionRecords
from pipeline.stores.sessions import SessionState
from pipeline.stores.stage_runs import Handoff
from workers.stages.common import BEGIN_READS, Deps, Skip, first_reads, log

INFLIGHT_POLL_SECONDS = 0.05


def body(d: Deps, state: SessionState, lease: StageLease) -> Handoff:
    sid, spec = state.session_id, state.spec
    if state.status != SessionStatus.POSTRUN:
        raise Skip(f"status is {state.status.value}")
    found, still_in_flight = _records(d, sid, state.read)
    # The outcome RUN (or a canceller) recorded; "no outcome" becomes an error, written with the end.
    outcome = state.outcome or Outcome.ERROR
    records, bad, errors = found.completions, found.unreadable, found.errors
    try:
        builder = builders.create(spec.builder.strategy, spec.builder.config)
        ctx = builders.BuildContext(sid, spec.task_id, spec.agent.harness, spec.metadata)
        trajectory = builder.build(records, ctx)
    except Exception as exc:
        log.warning("postrun %s: build failed: %s", sid, exc)
        trajectory = Trajectory(error=f"build failed: {exc}")  # EVALUATE turns this into ERROR
    trajectory.status = outcome.terminal_status()
    trajectory.metadata.update({"completions": len(records), "unreadable_records": bad,
                                "builder": spec.builder.strategy, **call_errors(errors)})
    if still_in_flight:
        # Calls the proxy still held when the drain gave up (an engine slower than the drain on a
        # call the agent made before it was stopped): their records land later and are not in
        # this trajectory. Said, so it is not a silent gap.
        trajectory.metadata["calls_in_flight_left_out"] = still_in_flight
        log.warning("postrun %s: %d model call(s) still in flight after %.0fs; built without them", sid,
                    still_in_flight, d.settings.inflight_drain_seconds)
    if not still_in_flight and (gaps := calls_unrecorded(state.calls_admitted, records, errors)):
        # Admitted calls with neither a completion nor an error record (a record write that outlived
        # the proxy's wait for Redis, a killed proxy): the agent got no answer from them; counted.
        trajectory.metadata["calls_unrecorded"] = gaps
    unanswered = last_call_unanswered(state.calls_admitted, records, errors) if not still_in_flight else None
    if unanswered:
        trajectory.metadata["last_call_unanswered"] = unanswered
        if outcome == Outcome.COMPLETED and not trajectory.error:
            # The agent ended after its last model call failed on the service's side (a harness
            # may exit 0 on a failed stream): how it ended is not the policy's doing -- an ERROR,
            # never a COMPLETED sample graded and trained on.
            trajectory.error = f"the agent's last model call got no answer (a fault of the service): {unanswered}"
    if not records and outcome == Outcome.COMPLETED and not trajectory.error:
        # An agent that exits 0 without one model call did not do the task (misconfigured CLI,
        # wrong base URL): never a COMPLETED session with nothing to train on.
        trajectory.error = "no completions captured: the agent made no model call through the proxy"
    return Handoff(Stage.EVALUATE, SessionStatus.EVALUATING, (SessionStatus.POSTRUN,), {"postrun_ended_at": time.time()},
                   outcome=None if state.outcome else Outcome.ERROR, error="no outcome recorded",
                   puts=(d.stores.outputs.trajectory_put(sid, trajectory),))


CLIENT_GONE = "ClientGone"  # proxy.errors.ClientGone's name in its error records (workers do not import proxy)


def call_errors(errors: list) -> dict:
    """The model calls that failed, by error type, and the last one's cause (for the result).
    Calls aborted because the agent closed its connection mid-call (ClientGone: stopped at its
    deadline, killed, cancelled) are counted apart, as ``calls_aborted``: a consequence of the
    stop, never its cause."""
    aborted = sum(1 for e in errors if e.error_type == CLIENT_GONE)
    failed = [e for e in errors if e.error_type != CLIENT_GONE]
    out: dict = {"calls_aborted": aborted} if aborted else {}
    if not failed:
        return out
    last = max(failed, key=lambda e: e.finished_at or 0)
    return {**out, "proxy_errors": dict(Counter(e.error_type for e in failed)),
            "last_proxy_error": f"{last.status_code} {last.error_type}: {last.message[:500]}"}


def calls_unrecorded(admitted: int, completions: list, errors: list) -> int:
    """How many of the session's ``admitted`` calls (seqs 1..admitted) left no record at all."""
    recorded = {c.seq for c in completions} | {e.seq for e in errors if e.seq is not None}
    return sum(1 for seq in range(1, admitted + 1) if seq not in recorded)


def last_call_unanswered(admitted: int, completions: list, errors: list) -> str | None:
    """Why the session's last admitted model call gave its agent no answer through a fault of
    the service (the proxy, its Redis, the engine: a 5xx error record, or no record at all --
    the proxy died, or Redis was away even for the error), or None. A 4xx is the request's own
    (a context overflow the agent may end on); ``ClientGone`` is the agent leaving."""
    recorded: dict[int, object] = {c.seq: None for c in completions}
    recorded.update({e.seq: e for e in errors if e.seq is not None})
    last = max(recorded, default=0)
    if admitted > last:
        return f"{admitted - last} admitted model call(s) left no record (the proxy or its Redis failed)"
    error = recorded.get(last)
    if error is not None and error.status_code >= 500 and error.error_type != CLIENT_GONE:
        return f"{error.status_code} {error.error_type}: {error.message[:300]}"
    return None


def _queue_reads(d: Deps, pipe: Any, sid: str) -> None:
    d.stores.sessions.queue_inflight_calls(pipe, sid)
    d.stores.records.queue_all(pipe, sid)


BEGIN_READS[Stage.POSTRUN] = _queue_reads  # the first look at the records: on the stage's begin


def _records(d: Deps, sid: str, read: list[Any] | None = None) -> tuple[SessionRecords, int]:
    """The session's records, once the model calls still inside the proxy have landed theirs
    (or ``inflight_drain_seconds`` passed: then also how many were still in flight); no round
    trip of its own when none is in flight (``read``: ``_queue_reads``'s replies, read with the
    stage's begin), else one per poll."""
    deadline = time.monotonic() + d.settings.inflight_drain_seconds
    while True:
        inflight, completions, errors = first_reads(d, Stage.POSTRUN, sid, read)
        if inflight <= 0 or time.monotonic() >= deadline:
            return d.stores.records.parse_all(completions, errors), max(0, int(inflight))
        read = None
        time.sleep(INFLIGHT_POLL_SECONDS)
