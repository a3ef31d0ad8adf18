"""Weight-sync control shared by every proxy process through Redis (``ProxyControlStore``):
pause (new model calls wait, calls in flight drain), resume (optionally with a new policy
version, stamped on every record from then on)."""

from __future__ import annotations

import time
from typing import Any

from pipeline.stores.proxy_control import ProxyControlStore
from proxy.errors import UpstreamTimeout

POLL_SECONDS = 0.05


class Control:
    ENTER = ProxyControlStore.ENTER
    EXIT = ProxyControlStore.EXIT

    def __init__(self, store: ProxyControlStore, default_policy_version: str | None = None) -> None:
        self.store = store
        self.default_policy_version = default_policy_version

    def entered(self, replies: list[Any], max_wait: float) -> str | None:
        """The policy version for an entered call (``replies`` of ``ENTER``); while paused, step
        out and wait."""
        _, paused, version = replies
        version = version.decode() if version else None
        deadline = time.monotonic() + max_wait
        while paused:
            self.exit()
            if time.monotonic() > deadline:
                raise UpstreamTimeout("inference is paused for weight sync and did not resume in time")
            time.sleep(POLL_SECONDS)
            paused, version = self.store.enter()
        return version or self.default_policy_version

    def exit(self) -> None:
        self.store.exit()

    def pause(self, timeout: float) -> dict[str, Any]:
        self.store.set_paused(True)
        deadline = time.monotonic() + timeout
        while self.store.inflight() > 0 and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        return self.status()

    def resume(self, policy_version: str | None = None) -> dict[str, Any]:
        if policy_version is not None:
            self.store.set_policy_version(policy_version)
        self.store.set_paused(False)
        return self.status()

    def status(self) -> dict[str, Any]:
        paused, version, inflight = self.store.read()
        return {"paused": paused, "inflight": inflight, "drained": inflight == 0,
                "policy_version": version or self.default_policy_version}
