"""Tasks in Redis: creation (expansion into sessions), status aggregation and cancellation.

Shared by the rollout API (submit/poll/cancel) and the callback stage (counting finished
sessions). Counting is idempotent: a session is counted by SADD, so a redelivered callback
cannot finish a task twice.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from pipeline import keys
from pipeline.codec import text
from pipeline.errors import TaskExists, TaskNotFound, TransitionRefused
from pipeline.messages import init_priority, queue_key, stage_message
from pipeline.schemas import SessionResult, SessionSpec, SessionSummary, TaskRequest, TaskStatus
from pipeline.status import Outcome, SessionStatus, Stage, TaskState
from pipeline.stores import lua
from pipeline.stores.callbacks import CallbackOutbox
from pipeline.stores.leases import note_sent
from pipeline.stores.outputs import OutputStore
from pipeline.stores.ready import ReadyBuffer
from pipeline.stores.sessions import SessionStore

CREATE_ATTEMPTS = 3  # transactions interrupted by a lost connection before a submission is a 503


class TaskStore:
    def __init__(self, r: redis.Redis, sessions: SessionStore, ready: ReadyBuffer, outputs: OutputStore,
                 callbacks: CallbackOutbox, ttl_seconds: int = 7 * 24 * 3600) -> None:
        self._r = r
        self.sessions = sessions
        self.ready = ready
        self.outputs = outputs
        self.callbacks = callbacks
        self._ttl = ttl_seconds
        self._cas = lua.bind(r, lua.TASK_STATE_CAS)
        self._finish = lua.bind(r, lua.TASK_FINISH)

    # --- submit ------------------------------------------------------------------------------

    def create(self, request: TaskRequest) -> list[SessionSpec]:
        """Store the task, register its sessions and queue their INIT messages in one
        MULTI/EXEC: a submission either exists completely, its sessions on their way, or not at
        all (a failure half-way leaves nothing to conflict with)."""
        key = keys.task(request.task_id)
        specs = SessionSpec.expand(request)
        payload = request.model_dump_json()  # before anything is written: it may fail
        for _ in range(CREATE_ATTEMPTS):
            now = time.time()
            try:
                self._create(request, key, specs, payload, now)
                return specs
            except redis.WatchError:
                # A submission of the same id in between -- or redis-py's word for a connection
                # lost while watching, the EXEC unsent or sent: whose task is it, if any?
                stamp = self._r.hget(key, "created_at")
                if stamp is None:
                    continue  # nothing was written: try again
                if text(stamp) == repr(now) and text(self._r.hget(key, "request") or b"") == payload:
                    return specs  # this call's own EXEC went through before the connection dropped
                raise TaskExists(request.task_id) from None
        raise redis.ConnectionError(f"task {request.task_id} could not be stored: its transaction was "
                                    f"interrupted {CREATE_ATTEMPTS} times")

    def _create(self, request: TaskRequest, key: str, specs: list[SessionSpec], payload: str, now: float) -> None:
        with self._r.pipeline(transaction=True) as pipe:
            pipe.watch(key)
            if pipe.exists(key):
                raise TaskExists(request.task_id)
            pipe.multi()
            pipe.hset(key, mapping={"created_at": repr(now), "request": payload,
                                    "state": TaskState.PENDING.value, "total": len(specs)})
            priority = init_priority(request.dispatch_priority)
            init = Stage.INIT
            for spec in specs:
                self.sessions.register(spec, pipe)
                note_sent(pipe, spec.session_id, init)  # cleared when INIT starts; else the reaper resends
                pipe.lpush(queue_key(init.queue, priority),
                           stage_message(init.task_name, spec.session_id, init.queue, priority))
            pipe.rpush(keys.task_sessions(request.task_id), *[s.session_id for s in specs])
            pipe.zadd(keys.TASKS_INDEX, {request.task_id: now})
            pipe.zremrangebyscore(keys.TASKS_INDEX, "-inf", repr(now - self._ttl))  # bounded
            lifetime = int(request.timeout_seconds) + self._ttl + 3600  # as its sessions
            for k in (key, keys.task_sessions(request.task_id)):
                pipe.expire(k, lifetime)
            pipe.execute()

    # --- reads -------------------------------------------------------------------------------

    @staticmethod
    def key(task_id: str) -> str:
        """The task hash's key (for scripts that move a task with a session: ``ReadyBuffer.admit``)."""
        return keys.task(task_id)

    def exists(self, task_id: str) -> bool:
        return bool(self._r.exists(keys.task(task_id)))

    def state(self, task_id: str) -> TaskState | None:
        raw = self._r.hget(keys.task(task_id), "state")
        return TaskState(text(raw)) if raw else None

    def session_ids(self, task_id: str) -> list[str]:
        return [text(s) for s in self._r.lrange(keys.task_sessions(task_id), 0, -1)]

    def request(self, task_id: str) -> TaskRequest:
        raw = self._r.hget(keys.task(task_id), "request")
        if raw is None:
            raise TaskNotFound(task_id)
        return TaskRequest.model_validate_json(raw)

    def status(self, task_id: str, *, include_results: bool = True) -> TaskStatus:
        raw: dict[Any, Any] = self._r.hgetall(keys.task(task_id))
        f = {text(k): text(v) for k, v in raw.items()}
        if "request" not in f:
            raise TaskNotFound(task_id)
        sids = self.session_ids(task_id)
        # One round trip for every session: status, sample index and stage stamps, and the
        # terminal result when there is one (this is what progress bars poll).
        pipe = self._r.pipeline(transaction=False)
        for sid in sids:
            self.sessions.queue_summary(pipe, sid)
            self.outputs.queue_result(pipe, sid)
        pipe.hgetall(keys.task_result_paths(task_id))
        *replies, path_map = pipe.execute()
        paths = {text(k): text(v) for k, v in path_map.items()}
        counts: dict[str, int] = {}
        summaries: list[SessionSummary] = []
        results: list[SessionResult] = []
        for sid, row, blob in zip(sids, replies[::2], replies[1::2]):
            st, index, timing = self.sessions.parse_summary(row)
            name = st.value if st else "MISSING"
            counts[name] = counts.get(name, 0) + 1
            result = self.outputs.parse_result(blob) if include_results else None
            summary = result.summary() if result is not None else self.outputs.parse_summary(blob)
            if summary is not None:
                summaries.append(summary)
                if result is not None:
                    results.append(result)
            elif st is not None:
                summaries.append(SessionSummary(session_id=sid, sample_index=index, status=st,
                                                durations_ms=timing.durations_ms))
        request = TaskRequest.model_validate_json(f["request"])
        state = TaskState(f.get("state", TaskState.PENDING.value))
        if state == TaskState.PENDING and set(counts) - {SessionStatus.REGISTERED.value}:
            # Running from its first session's start: read off the sessions rather than written by
            # every INIT (a round trip per session for what only this read shows).
            state = TaskState.RUNNING
        return TaskStatus(
            task_id=task_id,
            status=state,
            total_sessions=int(f.get("total", len(sids))),
            finished_sessions=int(self._r.scard(keys.task_finished(task_id))),
            counts=counts,
            sessions=summaries,
            results=results,
            created_at=float(f["created_at"]) if f.get("created_at") else None,
            finished_at=float(f["finished_at"]) if f.get("finished_at") else None,
            callback=self.callbacks.record(task_id),
            metadata=request.metadata,
            result_paths=[paths[sid] for sid in sids if sid in paths],
            early_stopped=bool(f.get("early_stopped")),
            early_stop_min_usable_sessions=request.early_stop_min_usable_sessions,
        )

    def recent(self, limit: int = 50) -> list[str]:
        members: list[bytes] = self._r.zrevrange(keys.TASKS_INDEX, 0, limit - 1)  # type: ignore[assignment]
        return [text(t) for t in members]

    def state_counts(self, limit: int = 1000) -> dict[str, int]:
        pipe = self._r.pipeline(transaction=False)
        for tid in self.recent(limit):
            pipe.hget(keys.task(tid), "state")
        counts: dict[str, int] = {}
        for v in pipe.execute():
            if v is not None:
                counts[text(v)] = counts.get(text(v), 0) + 1
        return counts

    # --- lifecycle ---------------------------------------------------------------------------

    def count_finished(self, task_id: str, session_id: str) -> bool:
        """Count a terminal session (once, however often it is redelivered); True when every
        session of the task has now been counted."""
        pipe = self._r.pipeline(transaction=False)
        self.queue_count_finished(pipe, task_id, session_id)
        return self.all_finished(pipe.execute())

    def queue_count_finished(self, pipe: Any, task_id: str, session_id: str) -> None:
        """Add to ``pipe`` the four commands whose replies ``all_finished`` reads (last on it)."""
        pipe.sadd(keys.task_finished(task_id), session_id)
        pipe.expire(keys.task_finished(task_id), self._ttl)
        pipe.scard(keys.task_finished(task_id))
        pipe.hget(keys.task(task_id), "total")

    @staticmethod
    def all_finished(replies: list[Any]) -> bool:
        *_, done, total = replies
        return int(done) >= int(total or 0)

    def count_usable(self, task_id: str, session_id: str) -> int:
        """Count a session that ended usable (once, however often redelivered); how many now."""
        pipe = self._r.pipeline(transaction=False)
        pipe.sadd(keys.task_usable(task_id), session_id)
        pipe.expire(keys.task_usable(task_id), self._ttl)
        pipe.scard(keys.task_usable(task_id))
        return int(pipe.execute()[2])

    def note_result_path(self, task_id: str, session_id: str, path: str, pipe: Any = None) -> None:
        """Record the session's results-directory file (idempotent: the same path again).
        (``pipe``: queued on the caller's pipeline instead of sent now.)"""
        target = pipe if pipe is not None else self._r.pipeline(transaction=False)
        target.hset(keys.task_result_paths(task_id), session_id, path)
        target.expire(keys.task_result_paths(task_id), self._ttl + 3600)  # as long as the task's keys
        if pipe is None:
            target.execute()

    def finish(self, task_id: str) -> TaskState:
        """Idempotent: the first call decides completed/cancelled and stamps the end."""
        final = self._finish(keys=[keys.task(task_id)], args=[
            TaskState.CANCELLING.value, TaskState.COMPLETED.value, TaskState.CANCELLED.value, repr(time.time())])
        return TaskState(final.decode() if isinstance(final, bytes) else final)

    def cancel(self, task_id: str, *, early_stop: bool = False) -> tuple[list[str], int]:
        """Cancel every session that has not finished. Returns the sessions not held by a worker
        (queued for INIT, or waiting in READY), moved to POSTRUN here so the caller dispatches
        POSTRUN for them (their runtime is torn down), and how many sessions inside a worker were
        flagged (they see the flag within ``cancel_poll_seconds``). ``early_stop``: enough
        sessions are usable -- the task keeps its state and completes; it is not cancelled."""
        if not self.exists(task_id):
            raise TaskNotFound(task_id)
        if early_stop:
            self._r.hset(keys.task(task_id), "early_stopped", "1")
        else:
            self._cas(keys=[keys.task(task_id)], args=[
                f"{TaskState.PENDING.value},{TaskState.RUNNING.value}", TaskState.CANCELLING.value])
        moved: list[str] = []
        flagged = 0
        for sid in self.session_ids(task_id):
            status = self.sessions.status(sid)
            if status is None or status.is_terminal():
                continue
            newly = self.sessions.request_cancel(sid)
            if self._cancel_idle(sid, status):
                moved.append(sid)
            elif newly:  # a repeated cancel does not count again what an earlier one moved or flagged
                flagged += 1
        return moved, flagged

    def _cancel_idle(self, sid: str, status: SessionStatus) -> bool:
        """One step each (a caller dying half-way left a READY session out of READY yet READY,
        which nothing would ever move on): out of READY, the move to POSTRUN and its outcome.
        Whoever then sends POSTRUN -- the caller, or the guard of the INIT or RUN message the
        session already has (``Skip``) -- tears it down."""
        outcome = {"outcome": Outcome.CANCELLED.value, "error": "cancelled before the agent ran"}
        try:
            if status == SessionStatus.READY:
                return self.ready.claim_to(sid, SessionStatus.POSTRUN, **outcome)  # False: RUN claimed it first
            if status == SessionStatus.REGISTERED:
                self.sessions.transition(sid, SessionStatus.POSTRUN, expected=[status], **outcome)
                return True
        except TransitionRefused:
            pass
        return False
