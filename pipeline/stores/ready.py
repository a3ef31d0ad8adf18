"""The bounded READY buffer: initialised runtimes waiting for a run slot.

A session holds a *slot* from the moment INIT may start its runtime until RUN claims it, so INIT
never runs ahead of the buffer (backpressure). Slots are leases in a sorted set scored by expiry:
a slot whose holder died frees itself. The READY list keeps FIFO order for depth reporting and
claiming; claiming removes the session from both atomically, so a RUN worker and a canceller can
never both take the same runtime.
"""

from __future__ import annotations

from typing import Any, Callable

import redis

from pipeline import keys
from pipeline.status import SessionStatus, TaskState
from pipeline.stores import lua
from pipeline.stores.sessions import SessionStore


class ReadyBuffer:
    def __init__(self, r: redis.Redis, capacity: int) -> None:
        self._r = r
        self.capacity = capacity
        self._reserve = lua.bind(r, lua.READY_RESERVE)
        self._push = lua.bind(r, lua.READY_PUSH)
        self._claim = lua.bind(r, lua.READY_CLAIM)
        self._claim_start = lua.bind(r, lua.READY_CLAIM_START)
        self._admit = lua.bind(r, lua.INIT_ADMIT)

    def reserve(self, session_id: str, ttl_seconds: float) -> bool:
        """Take a slot for a session about to initialise; False when the buffer is full."""
        return bool(self._reserve(keys=[keys.READY_SLOTS], args=[session_id, self.capacity, ttl_seconds]))

    def admit(self, session_id: str, task_key: str, ttl_seconds: float, **fields: Any) -> bool:
        """INIT's start in one step: a slot (False, nothing written, when the buffer is full),
        the session's move REGISTERED -> INITIALIZING with ``fields``, its task's PENDING ->
        RUNNING. A refused move raises ``TransitionRefused`` and gives the slot back."""
        target = SessionStatus.INITIALIZING
        reply = self._admit(keys=[keys.READY_SLOTS, keys.session(session_id), task_key],
                            args=[session_id, self.capacity, ttl_seconds, TaskState.PENDING.value,
                                  TaskState.RUNNING.value,
                                  *SessionStore.transition_args(target, [SessionStatus.REGISTERED], fields)])
        if not reply[0]:
            return False
        ok, previous = reply[1]
        SessionStore.transition_result(session_id, target, ok, previous)
        return True

    def push(self, session_id: str, ttl_seconds: float) -> None:
        """The runtime is initialised: keep the slot until ``ttl`` and queue it for RUN. (INIT's
        own end does this inside its fenced STAGE_FINISH; this is the same write on its own.)"""
        self._push(keys=[keys.READY_SLOTS, keys.READY_LIST], args=[session_id, ttl_seconds])

    def claim(self, session_id: str) -> bool:
        """Take the session out of READY; exactly one caller ever gets True."""
        return bool(self._claim(keys=[keys.READY_SLOTS, keys.READY_LIST], args=[session_id]))

    def claim_to_run(self, session_id: str, **fields: Any) -> bool:
        """``claim`` and, in the same step, move the session READY -> RUNNING with ``fields``
        (RUN's start); False when it was not in READY. A refused move (the session's status is no
        longer READY) raises ``TransitionRefused`` and takes nothing."""
        return self.claim_to(session_id, SessionStatus.RUNNING, **fields)

    def claim_to(self, session_id: str, target: SessionStatus, **fields: Any) -> bool:
        """``claim_to_run`` to any ``target`` (a cancel: POSTRUN, with the outcome in ``fields``)."""
        return self.claim_to_reading(session_id, target, fields)[0]

    def claim_to_reading(self, session_id: str, target: SessionStatus, fields: dict[str, Any],
                         reads: Callable[[Any], None] | None = None) -> tuple[bool, list[Any]]:
        """``claim_to`` with plain reads (``reads`` queues them on a pipeline) sent ahead of the
        claim in the same round trip; returns whether it claimed, and the reads' replies."""
        script_keys = [keys.READY_SLOTS, keys.READY_LIST, keys.session(session_id)]
        args = [session_id, *SessionStore.transition_args(target, [SessionStatus.READY], fields)]
        reply, replies = lua.after_reads(self._r, self._claim_start, lua.READY_CLAIM_START, script_keys, args, reads)
        read = replies or []
        if not reply[0]:
            return False, read
        ok, previous = reply[1]
        SessionStore.transition_result(session_id, target, ok, previous)
        return True, read

    def release(self, session_id: str) -> None:
        """Give the slot back without running (INIT failed or the session was cancelled)."""
        pipe = self._r.pipeline(transaction=True)
        pipe.zrem(keys.READY_SLOTS, session_id)
        pipe.lrem(keys.READY_LIST, 0, session_id)
        pipe.execute()

    def depth(self) -> int:
        return int(self._r.llen(keys.READY_LIST))

    def reserved(self) -> int:
        return int(self._r.zcard(keys.READY_SLOTS))

    def snapshot(self) -> dict[str, int]:
        return {"depth": self.depth(), "reserved": self.reserved(), "capacity": self.capacity}
