"""The two ends of a stage, one round trip each (the redelivery guard, ``workers/stages/common.py``):

* ``begin``: take the stage's lease, read the session, mark the stage started (and stamp its
  start, for stages that have a stamp) -- STAGE_BEGIN, with the stage's own first reads (if
  any) queued ahead of it in the same round trip;
* ``finish``: in one MULTI/EXEC, the stage's outputs under staged names (``Handoff.puts``), then
  STAGE_FINISH: the session's move to its next status with the fields that go with it, the
  outcome (first write wins), the outputs renamed into place, the "done" marker, the next stage's
  message recorded as sent and pushed onto its Celery queue, INIT's session parked in READY, the
  lease released. Atomic: no crash leaves a stage done without its successor
  sent, or a session moved without its stage marked done. Fenced: a copy that stalled past its
  lease while another took over writes none of it (``LeaseLost``);

and ``send``, a stage message outside a stage's end (the API's cancel, the reaper, early stop).
Messages are built by ``pipeline.messages`` in Celery's own format and consumed by the stage
queues' Celery workers as any other; only Celery's publishing path is skipped (its cost per
message was most of what orchestration cost).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import redis

from pipeline import keys
from pipeline.errors import LeaseLost
from pipeline.messages import queue_key, stage_message
from pipeline.status import Outcome, SessionStatus, Stage
from pipeline.stores import lua, stage_metrics
from pipeline.stores.leases import StageLease
from pipeline.stores.sessions import DONE_NOWHERE, SessionState, SessionStore, done_field, started_field

_LEASE_KEYS = [keys.LEASE_EXPIRY, keys.LEASE_OWNER, keys.LEASE_SENT]


@dataclass
class Handoff:
    """How a stage body ends: the stage that comes next (None: nowhere) and what the stage's end
    writes with its done marker, atomically: the session's move to ``status`` (from one of
    ``expected``; all of the status's predecessors when empty) with ``fields``, the ``outcome``
    if none is recorded yet, the stage's outputs (``puts``) and, for INIT's end, the session
    parked in READY for ``ready_ttl`` seconds."""

    next: Stage | None
    status: SessionStatus | None = None
    expected: tuple[SessionStatus, ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)
    outcome: Outcome | None = None
    error: str | None = None
    ready_ttl: float | None = None
    # (key, value, ttl seconds): the stage's outputs, written only if its end is (fenced).
    puts: tuple[tuple[str, bytes, int], ...] = ()


@dataclass
class Begun:
    lease: StageLease
    state: SessionState | None  # None: no such session (expired, or never registered); as before the mark
    stamped_at: float  # the start stamp's value, if the stage has one and none was there
    # The replies of the reads queued with the begin (``begin``'s ``reads``), None without any.
    read: list[Any] | None = None


class StageRuns:
    def __init__(self, r: redis.Redis, lease_seconds: float) -> None:
        self._r = r
        self.lease_seconds = lease_seconds
        self._begin = lua.bind(r, lua.STAGE_BEGIN)
        self._finish = lua.bind(r, lua.STAGE_FINISH)
        self._send = lua.bind(r, lua.STAGE_SEND)

    def begin(self, session_id: str, stage: Stage, stamp: str | None = None,
              reads: Callable[[Any], None] | None = None) -> Begun | None:
        """None when another live worker holds this stage of this session (a duplicate).
        ``stamp``: a timing field set to now with the started mark. ``reads``: queues plain reads
        on a pipeline, sent ahead of the begin script in the same round trip (their replies in
        ``Begun.read``): data the stage's body reads first that nobody changes once the stage's
        message is sent (the outputs of the stages before it)."""
        lease = StageLease(self._r, session_id, stage, self.lease_seconds)
        now = time.time()
        script_keys = [*_LEASE_KEYS, keys.session(session_id)]
        args = [lease.member, lease.token, lease.ttl_ms, started_field(stage), *((stamp, repr(now)) if stamp else ())]
        reply, read = lua.after_reads(self._r, self._begin, lua.STAGE_BEGIN, script_keys, args, reads)
        if not reply[0]:
            return None
        lease.adopt()
        return Begun(lease, SessionStore.parse(session_id, reply[1]), now, read)

    def finish(self, lease: StageLease, session_id: str, *, done: Stage | None = None,
               handoff: Handoff | None = None, send: Stage | None = None, priority: int = 0,
               result: str = "done", seconds: float | None = None) -> None:
        """End the stage: ``done`` marks that stage finished, sending the session to
        ``handoff.next`` with ``handoff``'s writes; without ``done``, only ``send`` goes out
        (a redelivered copy repeating what a finished stage did). ``result`` and ``seconds``:
        how the run ended and how long it took, counted (``stage_metrics``). Raises ``TransitionRefused``
        when the handoff's move is refused: then nothing was written and the lease is kept (it
        lapses; the reaper sends the stage again into its recovery path), and ``LeaseLost`` when
        this copy's lease was taken over (nothing written either)."""
        lease.stop_heartbeat()
        if handoff is not None:
            send = handoff.next
        done_args = [done_field(done), send.value if send is not None else DONE_NOWHERE] if done else ["", ""]
        message = stage_message(send.task_name, session_id, send.queue, priority) if send else b""
        move: list[Any] = ["", "", ""]
        if handoff is not None and handoff.status is not None:
            move = SessionStore.transition_args(handoff.status, handoff.expected or None, handoff.fields)
        elif handoff is not None and handoff.fields:
            move += SessionStore.field_args(handoff.fields)
        outcome = handoff.outcome.value if handoff is not None and handoff.outcome is not None else ""
        error = (handoff.error or "")[:4000] if handoff is not None else ""
        ready_ttl = handoff.ready_ttl if handoff is not None else None
        ready = [session_id, repr(ready_ttl)] if ready_ttl is not None else ["", ""]
        args = [lease.member, lease.token, *done_args, keys.lease_member(send.value, session_id) if send else "",
                repr(time.time()), message, *move[:3], outcome, error,
                *stage_metrics.run_fields(lease.stage, result, seconds), *ready, *move[3:]]
        script_keys = [*_LEASE_KEYS, keys.session(session_id), queue_key(send.queue, priority) if send else keys.LEASE_SENT,
                       keys.STAGE_METRICS, keys.READY_SLOTS, keys.READY_LIST]
        puts = handoff.puts if handoff is not None else ()
        staged = [f"{key}:staged:{lease.token}" for key, _, _ in puts]
        script_keys += [k for tmp, (key, _, _) in zip(staged, puts) for k in (tmp, key)]
        if not puts:
            ok, previous = self._finish(keys=script_keys, args=args)
        else:
            def build(pipe: Any) -> None:
                for tmp, (_, value, ttl) in zip(staged, puts):
                    pipe.set(tmp, value, ex=ttl)
                lua.queue(pipe, lua.STAGE_FINISH, script_keys, args)

            ok, previous = lua.execute(self._r, build, transaction=True)[-1]
        if ok == -1:
            raise LeaseLost(f"{lease.stage.value} of {session_id}: its lease was taken over; nothing written")
        if handoff is not None and handoff.status is not None:
            SessionStore.transition_result(session_id, handoff.status, ok, previous)

    def send(self, stage: Stage, session_id: str, priority: int = 0) -> None:
        self._send(keys=[keys.LEASE_SENT, queue_key(stage.queue, priority)],
                   args=[keys.lease_member(stage.value, session_id), repr(time.time()),
                         stage_message(stage.task_name, session_id, stage.queue, priority)])
