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

    def enter(self, max_wait: float) -> str | None:
        """Count an upstream call in flight, waiting while paused; returns the policy version.
        Counting *before* reading the flag is what lets ``pause`` trust a drained count."""
        deadline = time.monotonic() + max_wait
        while True:
            pipe = self._r.pipeline(transaction=False)
            pipe.incr(keys.PROXY_INFLIGHT)
            pipe.get(keys.PROXY_PAUSED)
            pipe.get(keys.PROXY_POLICY_VERSION)
            _, paused, version = pipe.execute()
            if not paused:
                return version.decode() if version else self.default_policy_version
            self._r.decr(keys.PROXY_INFLIGHT)
            if time.monotonic() > deadline:
                from proxy.errors import UpstreamTimeout

                raise UpstreamTimeout("inference is paused for weight sync and did not resume in time")
            time.sleep(POLL_SECONDS)

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
