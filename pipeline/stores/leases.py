"""Stage leases: which worker runs which stage of which session, kept alive by a heartbeat; and
the one-pass-at-a-time lock of the reaper.

Celery may deliver a stage task twice (visibility timeout, a retried lost worker, a crash
between publishing the next stage and acking). The lease makes a second copy step aside while
the first is alive. A worker that dies stops renewing; the reaper takes its expired lease
(``take_expired``: each to exactly one reaper) and sends the stage again, whose guard then
recovers. Leases live in one sorted set scored by expiry (plus an owner hash), so finding the
lost ones costs O(lost), not a scan of every live session. Times are Redis server time.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import redis

from pipeline import keys
from pipeline.codec import text
from pipeline.status import Stage
from pipeline.stores import lua

_KEYS = [keys.LEASE_EXPIRY, keys.LEASE_OWNER]


class StageLease:
    def __init__(self, r: redis.Redis, session_id: str, stage: Stage, ttl_seconds: float) -> None:
        self.member = keys.lease_member(stage.value, session_id)
        self.token = uuid.uuid4().hex
        self.ttl_ms = max(1, int(ttl_seconds * 1000))
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._acquire = lua.bind(r, lua.LEASE_ACQUIRE)
        self._renew = lua.bind(r, lua.LEASE_RENEW)
        self._release = lua.bind(r, lua.LEASE_RELEASE)

    def acquire(self) -> bool:
        if not self._acquire(keys=[*_KEYS, keys.LEASE_SENT], args=[self.member, self.token, self.ttl_ms]):
            return False
        self._thread = threading.Thread(target=self._heartbeat, name=f"lease:{self.member}", daemon=True)
        self._thread.start()
        return True

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000.0):
            try:
                if not self._renew(keys=_KEYS, args=[self.member, self.token, self.ttl_ms]):
                    self.lost.set()  # expired and taken: another worker may own the stage now
                    return
            except redis.RedisError:
                continue  # transient; the next beat retries before the lease runs out

    def stop_heartbeat(self) -> None:
        """Stop renewing without releasing (what a worker's death looks like; tests)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def release(self) -> None:
        self.stop_heartbeat()
        try:
            self._release(keys=_KEYS, args=[self.member, self.token])
        except redis.RedisError:
            pass  # Redis is away: the lease expires and the reaper finds nothing to resend

    def __enter__(self) -> "StageLease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def note_sent(r: Any, session_id: str, stage: Stage) -> None:
    """This stage's message is being sent (``r`` may be a pipeline: a submission registers its
    INIT messages in the same transaction that stores the task)."""
    r.zadd(keys.LEASE_SENT, {keys.lease_member(stage.value, session_id): time.time()})


def sent_before(r: redis.Redis, cutoff: float, limit: int = 1000) -> list[tuple[str, Stage, float]]:
    """(session, stage, when sent) of messages sent before ``cutoff`` whose stage never started."""
    rows: Any = r.zrangebyscore(keys.LEASE_SENT, "-inf", repr(cutoff), start=0, num=limit, withscores=True)
    out = []
    for member, score in rows:
        stage, _, sid = text(member).partition(":")
        out.append((sid, Stage(stage), float(score)))
    return out


def take_expired(r: redis.Redis, limit: int = 1000) -> list[tuple[str, Stage]]:
    """(session, stage) of leases whose holder stopped renewing, each handed to one caller."""
    members = lua.bind(r, lua.LEASE_TAKE_EXPIRED)(keys=_KEYS, args=[limit]) or []
    out = []
    for m in members:
        stage, _, sid = text(m).partition(":")
        out.append((sid, Stage(stage)))
    return out


def held(r: redis.Redis, session_id: str, stage: Stage) -> bool:
    """Whether a worker holds this stage's lease right now (an expired entry counts as free)."""
    return held_many(r, [(session_id, stage)])[0]


def held_many(r: redis.Redis, pairs: list[tuple[str, Stage]]) -> list[bool]:
    """``held`` for many (session, stage) pairs in one round trip."""
    pipe = r.pipeline(transaction=False)
    pipe.time()
    for sid, stage in pairs:
        pipe.zscore(keys.LEASE_EXPIRY, keys.lease_member(stage.value, sid))
    (seconds, _), *scores = pipe.execute()
    return [score is not None and score > seconds * 1000 for score in scores]


def try_reaper_pass(r: redis.Redis, ttl_seconds: float) -> bool:
    """Whether this process may run a reaper pass now (one pass per interval across workers)."""
    return bool(r.set(keys.REAPER_LOCK, "1", nx=True, ex=max(1, int(ttl_seconds))))
