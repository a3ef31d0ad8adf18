"""Tasks in Redis: creation (expansion into sessions), status aggregation, cancellation.

Shared by the rollout API (submit/poll/cancel) and the callback stage (counting finished
sessions). Counting is idempotent: a session is counted by SADD, so a redelivered callback
cannot finish a task twice.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from celery import Celery

from pipeline import keys
from pipeline.celery_app import dispatch
from pipeline.codec import unpack
from pipeline.ready_buffer import ReadyBuffer
from pipeline.schemas import (
    SessionResult, SessionSpec, SessionSummary, SessionTiming, TaskRequest, TaskStatus,
)
from pipeline.sessions import TIMING_FIELDS, SessionStore, TransitionRefused
from pipeline.status import Outcome, SessionStatus, Stage, TaskState


class TaskExists(Exception):
    pass


class TaskNotFound(Exception):
    pass


class TaskStore:
    def __init__(self, r: redis.Redis, sessions: SessionStore, ready: ReadyBuffer,
                 ttl_seconds: int = 7 * 24 * 3600) -> None:
        self._r = r
        self.sessions = sessions
        self.ready = ready
        self._ttl = ttl_seconds

    # --- submit ------------------------------------------------------------------------------

    def create(self, request: TaskRequest) -> list[SessionSpec]:
        key = keys.task(request.task_id)
        now = time.time()
        if not self._r.hsetnx(key, "created_at", repr(now)):
            raise TaskExists(request.task_id)
        specs = SessionSpec.expand(request)
        pipe = self._r.pipeline(transaction=False)
        pipe.hset(key, mapping={
            "request": request.model_dump_json(),
            "state": TaskState.PENDING.value,
            "total": len(specs),
        })
        for spec in specs:
            self.sessions.register(spec, pipe)
        pipe.rpush(keys.task_sessions(request.task_id), *[s.session_id for s in specs])
        pipe.zadd(keys.TASKS_INDEX, {request.task_id: now})
        for k in (key, keys.task_sessions(request.task_id)):
            pipe.expire(k, self._ttl)
        pipe.execute()
        return specs

    # --- reads -------------------------------------------------------------------------------

    def exists(self, task_id: str) -> bool:
        return bool(self._r.exists(keys.task(task_id)))

    def session_ids(self, task_id: str) -> list[str]:
        return [s.decode() for s in self._r.lrange(keys.task_sessions(task_id), 0, -1)]

    def request(self, task_id: str) -> TaskRequest:
        raw = self._r.hget(keys.task(task_id), "request")
        if raw is None:
            raise TaskNotFound(task_id)
        return TaskRequest.model_validate_json(raw)

    def status(self, task_id: str, *, include_results: bool = True) -> TaskStatus:
        f = {k.decode(): v.decode() for k, v in self._r.hgetall(keys.task(task_id)).items()}
        if "request" not in f:
            raise TaskNotFound(task_id)
        sids = self.session_ids(task_id)
        # One round trip for every session: status, sample index and stage stamps, and the
        # terminal result when there is one (this is what progress bars poll).
        fields = ("status", "sample_index", *TIMING_FIELDS)
        pipe = self._r.pipeline(transaction=False)
        for sid in sids:
            pipe.hmget(keys.session(sid), *fields)
            pipe.get(keys.session_result(sid))
        replies = pipe.execute()
        counts: dict[str, int] = {}
        summaries: list[SessionSummary] = []
        results: list[SessionResult] = []
        for sid, row, blob in zip(sids, replies[::2], replies[1::2]):
            st = SessionStatus(row[0].decode()) if row[0] else None
            name = st.value if st else "MISSING"
            counts[name] = counts.get(name, 0) + 1
            if blob is not None:
                result = SessionResult.model_validate(unpack(blob))
                summaries.append(result.summary())
                if include_results:
                    results.append(result)
            elif st is not None:
                timing = SessionTiming(**{k: float(v) for k, v in zip(TIMING_FIELDS, row[2:]) if v})
                summaries.append(SessionSummary(session_id=sid, sample_index=int(row[1] or 0), status=st,
                                                durations_ms=timing.durations_ms))
        request = TaskRequest.model_validate_json(f["request"])
        return TaskStatus(
            task_id=task_id,
            status=TaskState(f.get("state", TaskState.PENDING.value)),
            total_sessions=int(f.get("total", len(sids))),
            finished_sessions=int(self._r.scard(keys.task_finished(task_id))),
            counts=counts,
            sessions=summaries,
            results=results,
            created_at=float(f["created_at"]) if f.get("created_at") else None,
            finished_at=float(f["finished_at"]) if f.get("finished_at") else None,
            callback=json.loads(f["callback"]) if f.get("callback") else None,
            metadata=request.metadata,
        )

    def recent(self, limit: int = 50) -> list[str]:
        return [t.decode() for t in self._r.zrevrange(keys.TASKS_INDEX, 0, limit - 1)]

    def state_counts(self, limit: int = 1000) -> dict[str, int]:
        pipe = self._r.pipeline(transaction=False)
        for tid in self.recent(limit):
            pipe.hget(keys.task(tid), "state")
        counts: dict[str, int] = {}
        for v in pipe.execute():
            if v is not None:
                counts[v.decode()] = counts.get(v.decode(), 0) + 1
        return counts

    # --- lifecycle ---------------------------------------------------------------------------

    def mark_running(self, task_id: str) -> None:
        # Only from PENDING; a cancelling/finished task keeps its state.
        self._r.eval(
            "if redis.call('HGET', KEYS[1], 'state') == ARGV[1] then "
            "return redis.call('HSET', KEYS[1], 'state', ARGV[2]) end return 0",
            1, keys.task(task_id), TaskState.PENDING.value, TaskState.RUNNING.value)

    def count_finished(self, task_id: str, session_id: str) -> bool:
        """Count a terminal session (once, however often it is redelivered); True when every
        session of the task has now been counted."""
        pipe = self._r.pipeline(transaction=False)
        pipe.sadd(keys.task_finished(task_id), session_id)
        pipe.expire(keys.task_finished(task_id), self._ttl)
        pipe.scard(keys.task_finished(task_id))
        pipe.hget(keys.task(task_id), "total")
        _, _, done, total = pipe.execute()
        return int(done) >= int(total or 0)

    def finish(self, task_id: str) -> TaskState:
        """Idempotent: the first call decides completed/cancelled and stamps the end."""
        final = self._r.eval(
            "local s = redis.call('HGET', KEYS[1], 'state') "
            "if s == ARGV[2] or s == ARGV[3] then return s end "
            "local f = (s == ARGV[1]) and ARGV[3] or ARGV[2] "
            "redis.call('HSET', KEYS[1], 'state', f) "
            "redis.call('HSETNX', KEYS[1], 'finished_at', ARGV[4]) return f",
            1, keys.task(task_id), TaskState.CANCELLING.value, TaskState.COMPLETED.value,
            TaskState.CANCELLED.value, repr(time.time()))
        return TaskState(final.decode() if isinstance(final, bytes) else final)

    def claim_callback(self, task_id: str, ttl_seconds: int) -> bool:
        """Whether this process should POST the task result now: not delivered yet, and no
        other process is sending it (a sender that crashed frees the claim after ``ttl``)."""
        if self._r.hexists(keys.task(task_id), "callback"):
            return False
        return bool(self._r.set(keys.task_callback_claim(task_id), "1", nx=True, ex=ttl_seconds))

    def record_callback(self, task_id: str, info: dict[str, Any]) -> None:
        self._r.hset(keys.task(task_id), "callback", json.dumps(info))

    def cancel(self, task_id: str, app: Celery) -> dict[str, int]:
        """Cancel every session that has not finished. Sessions not held by a worker (queued for
        INIT, or waiting in READY) are moved to POSTRUN here so their runtime is torn down;
        sessions inside a worker see the cancel flag within ``cancel_poll_seconds``."""
        if not self.exists(task_id):
            raise TaskNotFound(task_id)
        self._r.eval(
            "local s = redis.call('HGET', KEYS[1], 'state') "
            "if s == ARGV[1] or s == ARGV[2] then return redis.call('HSET', KEYS[1], 'state', ARGV[3]) end "
            "return 0", 1, keys.task(task_id),
            TaskState.PENDING.value, TaskState.RUNNING.value, TaskState.CANCELLING.value)
        moved = flagged = 0
        for sid in self.session_ids(task_id):
            status = self.sessions.status(sid)
            if status is None or status.is_terminal():
                continue
            self.sessions.request_cancel(sid)
            if self._cancel_idle(sid, status):
                dispatch(app, Stage.POSTRUN, sid)
                moved += 1
            else:
                flagged += 1
        return {"moved_to_postrun": moved, "flagged": flagged}

    def _cancel_idle(self, sid: str, status: SessionStatus) -> bool:
        if status == SessionStatus.READY and not self.ready.claim(sid):
            return False  # a RUN worker claimed it first; it will see the flag
        if status not in (SessionStatus.REGISTERED, SessionStatus.READY):
            return False
        try:
            self.sessions.transition(sid, SessionStatus.POSTRUN, expected=[status])
        except TransitionRefused:
            return False
        self.sessions.set_outcome(sid, Outcome.CANCELLED, "cancelled before the agent ran")
        return True
