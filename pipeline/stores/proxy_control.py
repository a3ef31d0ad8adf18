"""Weight-sync state shared by every proxy process: the pause flag, the policy version stamped
on records, and the upstream calls in flight across all proxies.

In-flight calls are leases, not a counter: a sorted set of call ids scored by lease expiry, which
the proxy holding a call renews while it runs. A proxy that dies stops renewing, so its calls
stop counting within one lease period and ``pause`` can still drain after any crash.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from pipeline import keys
from pipeline.codec import text

Command = tuple[Any, ...]


class ProxyControlStore:
    def __init__(self, r: redis.Redis) -> None:
        self._r = r

    # ENTER leases the call *before* reading the pause flag: that order is what lets ``pause``
    # trust a drained count.
    @staticmethod
    def enter_commands(call_id: str, expiry: float) -> list[Command]:
        return [("ZADD", keys.PROXY_CALLS, repr(expiry), call_id), ("GET", keys.PROXY_PAUSED),
                ("GET", keys.PROXY_POLICY_VERSION)]

    @staticmethod
    def exit_commands(call_id: str) -> list[Command]:
        return [("ZREM", keys.PROXY_CALLS, call_id)]

    @staticmethod
    def purge_commands() -> list[Command]:
        """Drop lapsed leases (calls of dead proxies): the set stays as small as what runs."""
        return [("ZREMRANGEBYSCORE", keys.PROXY_CALLS, "-inf", repr(time.time()))]

    @staticmethod
    def renew_commands(call_id: str, expiry: float) -> list[Command]:
        return [("ZADD", keys.PROXY_CALLS, "XX", repr(expiry), call_id)]

    def enter(self, call_id: str, expiry: float) -> tuple[bool, str | None]:
        """Lease a call in flight; returns (paused, policy version)."""
        pipe = self._r.pipeline(transaction=False)
        for cmd in self.enter_commands(call_id, expiry):
            pipe.execute_command(*cmd)
        _, paused, version = pipe.execute()
        return bool(paused), text(version) if version else None

    def is_paused(self) -> bool:
        return bool(self._r.exists(keys.PROXY_PAUSED))

    def exit(self, call_id: str) -> None:
        self._r.zrem(keys.PROXY_CALLS, call_id)

    def set_paused(self, paused: bool) -> None:
        if paused:
            self._r.set(keys.PROXY_PAUSED, "1")
        else:
            self._r.delete(keys.PROXY_PAUSED)

    def set_policy_version(self, version: str) -> None:
        self._r.set(keys.PROXY_POLICY_VERSION, version)

    def inflight(self) -> int:
        """Calls in flight on live proxies; lapsed leases (dead proxies) are purged."""
        now = time.time()
        pipe = self._r.pipeline(transaction=False)
        pipe.zremrangebyscore(keys.PROXY_CALLS, "-inf", repr(now))
        pipe.zcard(keys.PROXY_CALLS)
        return int(pipe.execute()[1])

    def read(self) -> tuple[bool, str | None, int]:
        """(paused, policy version, calls in flight)."""
        paused, version = self._r.mget(keys.PROXY_PAUSED, keys.PROXY_POLICY_VERSION)
        return bool(paused), text(version) if version else None, self.inflight()
