"""Weight-sync control shared by every proxy process through Redis (``ProxyControlStore``):
pause (new model calls wait, calls in flight drain), resume (optionally with a new policy
version, stamped on every record from then on)."""

from __future__ import annotations

import time
from typing import Any, Callable

from pipeline.stores.proxy_control import ProxyControlStore
from proxy.errors import UpstreamTimeout

POLL_SECONDS = 0.05


class Control:
    def __init__(self, store: ProxyControlStore, default_policy_version: str | None = None) -> None:
        self.store = store
        self.default_policy_version = default_policy_version

    def entered(self, replies: list[Any], call_id: str, lease: Callable[[], float], max_wait: float) -> str | None:
        """The policy version for a call that entered (``replies`` of the store's enter
        commands); while paused, the call steps out and waits holding no lease (so a pause
        taken meanwhile drains), reading the flag alone until it clears, then enters again;
        the enter re-reads the flag after its lease is in, so a pause that lands in between is
        either seen by the call or counts the call."""
        _, paused, version = replies
        version = version.decode() if version else None
        deadline = time.monotonic() + max_wait
        while paused:
            self.store.exit(call_id)
            while True:
                if time.monotonic() > deadline:
                    raise UpstreamTimeout("inference is paused for weight sync and did not resume in time")
                time.sleep(POLL_SECONDS)
                if not self.store.is_paused():
                    break
            paused, version = self.store.enter(call_id, lease())
        return version or self.default_policy_version

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
