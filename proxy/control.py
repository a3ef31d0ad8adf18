"""Weight-sync control shared by every proxy process through Redis: pause (new model calls
wait, calls in flight drain), resume (optionally with a new policy version, stamped on every
record from then on)."""

from __future__ import annotations

import time
from typing import Any

import redis

from pipeline import keys

POLL_SECONDS = 0.05


class Control:
    def __init__(self, r: redis.Redis, default_policy_version: str | None = None) -> None:
        self._r = r
        self.default_policy_version = default_policy_version

    ENTER = (("INCR", keys.PROXY_INFLIGHT), ("GET", keys.PROXY_PAUSED), ("GET", keys.PROXY_POLICY_VERSION))
    EXIT = (("DECR", keys.PROXY_INFLIGHT),)
    # ENTER counts a call in flight *before* reading the pause flag: that order is what lets
    # ``pause`` trust a drained count.

    def entered(self, replies: list, max_wait: float) -> str | None:
        """The policy version for an entered call; while paused, step out and wait."""
        _, paused, version = replies
        deadline = time.monotonic() + max_wait
        while paused:
            self.exit()
            if time.monotonic() > deadline:
                from proxy.errors import UpstreamTimeout

                raise UpstreamTimeout("inference is paused for weight sync and did not resume in time")
            time.sleep(POLL_SECONDS)
            pipe = self._r.pipeline(transaction=False)
            for cmd in self.ENTER:
                pipe.execute_command(*cmd)
            _, paused, version = pipe.execute()
        return version.decode() if version else self.default_policy_version

    def exit(self) -> None:
        self._r.decr(keys.PROXY_INFLIGHT)

    def pause(self, timeout: float) -> dict[str, Any]:
        self._r.set(keys.PROXY_PAUSED, "1")
        deadline = time.monotonic() + timeout
        while self.inflight() > 0 and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        return self.status()

    def resume(self, policy_version: str | None = None) -> dict[str, Any]:
        if policy_version is not None:
            self._r.set(keys.PROXY_POLICY_VERSION, policy_version)
        self._r.delete(keys.PROXY_PAUSED)
        return self.status()

    def inflight(self) -> int:
        return max(0, int(self._r.get(keys.PROXY_INFLIGHT) or 0))

    def status(self) -> dict[str, Any]:
        paused, version = self._r.mget(keys.PROXY_PAUSED, keys.PROXY_POLICY_VERSION)
        inflight = self.inflight()
        return {"paused": bool(paused), "inflight": inflight, "drained": inflight == 0,
                "policy_version": version.decode() if version else self.default_policy_version}
