"""A worker's lease on one stage of one session, kept alive by a heartbeat thread.

Celery may deliver a stage task twice (visibility timeout, a retried lost worker, a crash
between publishing the next stage and acking). The lease makes a second copy step aside while
the first is alive; when the holder died, the lease expires and a redelivered copy may take over.
"""

from __future__ import annotations

import threading
import uuid

import redis

from pipeline import keys

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class StageLease:
    def __init__(self, r: redis.Redis, session_id: str, stage: str, ttl_seconds: float) -> None:
        self._r = r
        self.key = keys.session_lease(session_id, stage)
        self.token = uuid.uuid4().hex
        self.ttl_ms = int(ttl_seconds * 1000)
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> bool:
        if not self._r.set(self.key, self.token, nx=True, px=self.ttl_ms):
            return False
        self._thread = threading.Thread(target=self._heartbeat, name=f"lease:{self.key}", daemon=True)
        self._thread.start()
        return True

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000.0):
            try:
                if not self._r.eval(_RENEW, 1, self.key, self.token, self.ttl_ms):
                    self.lost.set()
                    return
            except redis.RedisError:
                continue  # transient; the next beat retries before the lease runs out

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        try:
            self._r.eval(_RELEASE, 1, self.key, self.token)
        except redis.RedisError:
            pass  # it expires on its own

    def __enter__(self) -> "StageLease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
