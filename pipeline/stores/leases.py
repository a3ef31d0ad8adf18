"""A worker's lease on one stage of one session, kept alive by a heartbeat thread; and the
one-pass-at-a-time lock of the reaper.

Celery may deliver a stage task twice (visibility timeout, a retried lost worker, a crash
between publishing the next stage and acking). The lease makes a second copy step aside while
the first is alive; when the holder died, the lease expires and a redelivered copy may take over.
The lease itself is redis-py's ``Lock`` (token-owned, atomic extend and release); what this
module adds is the heartbeat and the ``lost`` signal a long stage polls.
"""

from __future__ import annotations

import threading
from typing import Iterable

import redis
from redis.exceptions import LockError

from pipeline import keys
from pipeline.status import Stage


class StageLease:
    def __init__(self, r: redis.Redis, session_id: str, stage: Stage, ttl_seconds: float) -> None:
        self.key = keys.session_lease(session_id, stage.value)
        self._lock = r.lock(self.key, timeout=ttl_seconds, blocking=False, thread_local=False)
        self.ttl = ttl_seconds
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> bool:
        if not self._lock.acquire(blocking=False):
            return False
        self._thread = threading.Thread(target=self._heartbeat, name=f"lease:{self.key}", daemon=True)
        self._thread.start()
        return True

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl / 3.0):
            try:
                self._lock.reacquire()
            except LockError:  # expired and taken, or gone: another worker may own the stage now
                self.lost.set()
                return
            except redis.RedisError:
                continue  # transient; the next beat retries before the lease runs out

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        try:
            self._lock.release()
        except (LockError, redis.RedisError):
            pass  # lost already, or Redis is away: it expires on its own

    def __enter__(self) -> "StageLease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def live_leases(r: redis.Redis, pairs: Iterable[tuple[str, Stage]]) -> list[bool]:
    """Whether each (session, stage) has a live lease, in one round trip."""
    pipe = r.pipeline(transaction=False)
    for sid, stage in pairs:
        pipe.exists(keys.session_lease(sid, stage.value))
    return [bool(v) for v in pipe.execute()]


def try_reaper_pass(r: redis.Redis, ttl_seconds: float) -> bool:
    """Whether this process may run a reaper pass now (one pass per interval across workers)."""
    return bool(r.set(keys.REAPER_LOCK, "1", nx=True, ex=max(1, int(ttl_seconds))))
