"""The bounded READY buffer: initialised runtimes waiting for a run slot.

A session holds a *slot* from the moment INIT may start its runtime until RUN claims it, so INIT
never runs ahead of the buffer (backpressure). Slots are leases in a sorted set scored by expiry:
a slot whose holder died frees itself. The READY list keeps FIFO order for depth reporting and
claiming; claiming removes the session from both atomically, so a RUN worker and a canceller can
never both take the same runtime.
"""

from __future__ import annotations

import redis

from pipeline import keys
from pipeline.stores import lua


class ReadyBuffer:
    def __init__(self, r: redis.Redis, capacity: int) -> None:
        self._r = r
        self.capacity = capacity
        self._reserve = lua.bind(r, lua.READY_RESERVE)
        self._push = lua.bind(r, lua.READY_PUSH)
        self._claim = lua.bind(r, lua.READY_CLAIM)

    def reserve(self, session_id: str, ttl_seconds: float) -> bool:
        """Take a slot for a session about to initialise; False when the buffer is full."""
        return bool(self._reserve(keys=[keys.READY_SLOTS], args=[session_id, self.capacity, ttl_seconds]))

    def push(self, session_id: str, ttl_seconds: float) -> None:
        """The runtime is initialised: keep the slot until ``ttl`` and queue it for RUN."""
        self._push(keys=[keys.READY_SLOTS, keys.READY_LIST], args=[session_id, ttl_seconds])

    def claim(self, session_id: str) -> bool:
        """Take the session out of READY; exactly one caller ever gets True."""
        return bool(self._claim(keys=[keys.READY_SLOTS, keys.READY_LIST], args=[session_id]))

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
