"""Session state in Redis: one hash per session, written only through these methods.

Status writes go through one Lua script that checks the enum's rules server-side, so a write
that would leave a terminal state (or skip a stage) is refused even when two processes race.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Iterable

import redis

from pipeline import keys
from pipeline.schemas import SessionSpec, SessionTiming
from pipeline.status import Outcome, SessionStatus

_TRANSITION = """
local cur = redis.call('HGET', KEYS[1], 'status')
if not cur then return {0, ''} end
local ok = false
for s in string.gmatch(ARGV[2], '[^,]+') do
  if s == cur then ok = true end
end
if not ok then return {0, cur} end
redis.call('HSET', KEYS[1], 'status', ARGV[1])
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return {1, cur}
"""

TIMING_FIELDS = tuple(SessionTiming.model_fields)


class TransitionRefused(Exception):
    def __init__(self, session_id: str, current: str | None, target: SessionStatus) -> None:
        self.session_id, self.current, self.target = session_id, current, target
        super().__init__(f"session {session_id}: {current or 'missing'} -> {target.value} refused")


@dataclass
class SessionState:
    session_id: str
    status: SessionStatus
    spec: SessionSpec
    outcome: Outcome | None
    error: str | None
    cancel_requested: bool
    deadline: float | None
    runtime: dict[str, Any] | None
    timing: SessionTiming
    fields: dict[str, str]

    def remaining(self, now: float | None = None) -> float | None:
        if self.deadline is None:
            return None
        return self.deadline - (time.time() if now is None else now)


class SessionStore:
    def __init__(self, r: redis.Redis, ttl_seconds: int = 7 * 24 * 3600) -> None:
        self._r = r
        self._ttl = ttl_seconds
        self._transition = r.register_script(_TRANSITION)

    # --- creation and reads ------------------------------------------------------------------

    def register(self, spec: SessionSpec, pipe: Any = None) -> None:
        target = pipe if pipe is not None else self._r
        key = keys.session(spec.session_id)
        target.hset(
            key,
            mapping={
                "status": SessionStatus.REGISTERED.value,
                "task_id": spec.task_id,
                "sample_index": spec.sample_index,
                "spec": spec.model_dump_json(),
                "registered_at": repr(time.time()),
            },
        )
        target.expire(key, self._ttl)
        target.zadd(keys.ACTIVE_SESSIONS, {spec.session_id: time.time()})

    def retire(self, session_id: str) -> None:
        """The session is terminal and published: the reaper no longer watches it."""
        self._r.zrem(keys.ACTIVE_SESSIONS, session_id)

    def active(self, limit: int = 10_000) -> list[str]:
        return [s.decode() for s in self._r.zrange(keys.ACTIVE_SESSIONS, 0, limit - 1)]

    def get(self, session_id: str) -> SessionState | None:
        raw = self._r.hgetall(keys.session(session_id))
        if not raw:
            return None
        f = {k.decode(): v.decode() for k, v in raw.items()}
        return SessionState(
            session_id=session_id,
            status=SessionStatus(f["status"]),
            spec=SessionSpec.model_validate_json(f["spec"]),
            outcome=Outcome(f["outcome"]) if f.get("outcome") else None,
            error=f.get("error") or None,
            cancel_requested=f.get("cancel") == "1",
            deadline=float(f["deadline"]) if f.get("deadline") else None,
            runtime=json.loads(f["runtime"]) if f.get("runtime") else None,
            timing=SessionTiming(**{k: float(f[k]) for k in TIMING_FIELDS if f.get(k)}),
            fields=f,
        )

    def status(self, session_id: str) -> SessionStatus | None:
        raw = self._r.hget(keys.session(session_id), "status")
        return SessionStatus(raw.decode()) if raw else None

    # --- writes ------------------------------------------------------------------------------

    def transition(
        self,
        session_id: str,
        target: SessionStatus,
        *,
        expected: Iterable[SessionStatus] | None = None,
        **fields: Any,
    ) -> SessionStatus:
        """Move to ``target`` if the rules (and ``expected``) allow it; returns the old status."""
        allowed = target.predecessors()
        if expected is not None:
            allowed &= frozenset(expected)
        argv: list[Any] = [target.value, ",".join(s.value for s in allowed)]
        for k, v in fields.items():
            argv += [k, _encode(v)]
        ok, previous = self._transition(keys=[keys.session(session_id)], args=argv)
        previous = previous.decode() if isinstance(previous, bytes) else previous
        if not ok:
            raise TransitionRefused(session_id, previous or None, target)
        return SessionStatus(previous)

    def set(self, session_id: str, **fields: Any) -> None:
        self._r.hset(keys.session(session_id), mapping={k: _encode(v) for k, v in fields.items()})

    def stamp(self, session_id: str, field: str) -> float:
        now = time.time()
        self._r.hset(keys.session(session_id), field, repr(now))
        return now

    def set_outcome(self, session_id: str, outcome: Outcome, error: str | None = None) -> Outcome:
        """Record how the agent part ended; the first outcome wins (cancel beats a later timeout)."""
        key = keys.session(session_id)
        if self._r.hsetnx(key, "outcome", outcome.value):
            if error:
                self._r.hset(key, "error", error[:4000])
            return outcome
        return Outcome(self._r.hget(key, "outcome").decode())

    def expire_records(self, session_id: str, ttl_seconds: int) -> None:
        """Raw records are large; once the result is out they only serve debugging."""
        pipe = self._r.pipeline(transaction=False)
        for key in (keys.session_completions(session_id), keys.session_errors(session_id),
                    keys.session_trajectory(session_id)):
            pipe.expire(key, ttl_seconds)
        pipe.execute()

    def request_cancel(self, session_id: str) -> None:
        self._r.hset(keys.session(session_id), "cancel", "1")

    def cancel_requested(self, session_id: str) -> bool:
        return self._r.hget(keys.session(session_id), "cancel") == b"1"


def _encode(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    if hasattr(v, "value"):
        return str(v.value)
    return str(v)
