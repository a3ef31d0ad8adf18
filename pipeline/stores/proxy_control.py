"""Weight-sync state shared by every proxy process: the pause flag, the policy version stamped
on records, and the count of upstream calls in flight across all proxies."""

from __future__ import annotations

from typing import Any

import redis

from pipeline import keys
from pipeline.codec import text


class ProxyControlStore:
    # ENTER counts a call in flight *before* reading the pause flag: that order is what lets
    # ``pause`` trust a drained count.
    ENTER: tuple[tuple[Any, ...], ...] = (
        ("INCR", keys.PROXY_INFLIGHT), ("GET", keys.PROXY_PAUSED), ("GET", keys.PROXY_POLICY_VERSION))
    EXIT: tuple[tuple[Any, ...], ...] = (("DECR", keys.PROXY_INFLIGHT),)

    def __init__(self, r: redis.Redis) -> None:
        self._r = r

    def enter(self) -> tuple[bool, str | None]:
        """Count a call in flight; returns (paused, policy version)."""
        pipe = self._r.pipeline(transaction=False)
        for cmd in self.ENTER:
            pipe.execute_command(*cmd)
        _, paused, version = pipe.execute()
        return bool(paused), text(version) if version else None

    def exit(self) -> None:
        self._r.decr(keys.PROXY_INFLIGHT)

    def set_paused(self, paused: bool) -> None:
        if paused:
            self._r.set(keys.PROXY_PAUSED, "1")
        else:
            self._r.delete(keys.PROXY_PAUSED)

    def set_policy_version(self, version: str) -> None:
        self._r.set(keys.PROXY_POLICY_VERSION, version)

    def inflight(self) -> int:
        return max(0, int(self._r.get(keys.PROXY_INFLIGHT) or 0))

    def read(self) -> tuple[bool, str | None, int]:
        """(paused, policy version, calls in flight)."""
        paused, version, inflight = self._r.mget(keys.PROXY_PAUSED, keys.PROXY_POLICY_VERSION, keys.PROXY_INFLIGHT)
        return bool(paused), text(version) if version else None, max(0, int(inflight or 0))
