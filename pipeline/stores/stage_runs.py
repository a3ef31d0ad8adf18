"""The two ends of a stage, one round trip each (the redelivery guard, ``workers/stages/common.py``):

* ``begin``: take the stage's lease, read the session, mark the stage started (STAGE_BEGIN);
* ``finish``: mark it done, record the next stage's message as sent and push it onto its Celery
  queue, release the lease (STAGE_FINISH) -- atomically, so no crash can leave a stage done
  without its successor sent;

and ``send``, a stage message outside a stage's end (the API's cancel, the reaper, early stop).
Messages are built by ``pipeline.messages`` in Celery's own format and consumed by the stage
queues' Celery workers as any other; only Celery's publishing path is skipped (its cost per
message was most of what orchestration cost).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from pipeline import keys
from pipeline.messages import queue_key, stage_message
from pipeline.status import Stage
from pipeline.stores import lua
from pipeline.stores.leases import StageLease
from pipeline.stores.sessions import DONE_NOWHERE, SessionState, SessionStore, done_field, started_field

_LEASE_KEYS = [keys.LEASE_EXPIRY, keys.LEASE_OWNER, keys.LEASE_SENT]


@dataclass
class Begun:
    lease: StageLease
    state: SessionState | None  # None: no such session (expired, or never registered)


class StageRuns:
    def __init__(self, r: redis.Redis, lease_seconds: float) -> None:
        self._r = r
        self.lease_seconds = lease_seconds
        self._begin = lua.bind(r, lua.STAGE_BEGIN)
        self._finish = lua.bind(r, lua.STAGE_FINISH)
        self._send = lua.bind(r, lua.STAGE_SEND)

    def begin(self, session_id: str, stage: Stage) -> Begun | None:
        """None when another live worker holds this stage of this session (a duplicate)."""
        lease = StageLease(self._r, session_id, stage, self.lease_seconds)
        reply = self._begin(keys=[*_LEASE_KEYS, keys.session(session_id)],
                            args=[lease.member, lease.token, lease.ttl_ms, started_field(stage)])
        if not reply[0]:
            return None
        lease.adopt()
        return Begun(lease, SessionStore.parse(session_id, reply[1]))

    def finish(self, lease: StageLease, session_id: str, *, done: Stage | None = None,
               sent_to: Stage | None = None, send: Stage | None = None, priority: int = 0) -> None:
        """End the stage: ``done`` marks that stage finished, having sent the session to
        ``sent_to``; ``send`` is the stage whose message goes out now (usually ``sent_to``)."""
        lease.stop_heartbeat()
        done_args = [done_field(done), sent_to.value if sent_to is not None else DONE_NOWHERE] if done else ["", ""]
        message = stage_message(send.task_name, session_id, send.queue, priority) if send else b""
        self._finish(
            keys=[*_LEASE_KEYS, keys.session(session_id), queue_key(send.queue, priority) if send else keys.LEASE_SENT],
            args=[lease.member, lease.token, *done_args,
                  keys.lease_member(send.value, session_id) if send else "", repr(time.time()), message])

    def send(self, stage: Stage, session_id: str, priority: int = 0) -> None:
        self._send(keys=[keys.LEASE_SENT, queue_key(stage.queue, priority)],
                   args=[keys.lease_member(stage.value, session_id), repr(time.time()),
                         stage_message(stage.task_name, session_id, stage.queue, priority)])
