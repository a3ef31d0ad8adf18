"""This process's model calls in flight, held as leases in Redis (``ProxyControlStore`` for the
proxy-wide count that ``pause`` drains, ``SessionStore`` for the session's count that POSTRUN
waits on) and renewed by a heartbeat while they run. A proxy that is killed stops renewing, so
its calls disappear from both counts within one lease period instead of pinning them forever.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from pipeline.stores import Stores
from proxy.hot_redis import HotRedis

log = logging.getLogger("polar.proxy")


@dataclass(frozen=True)
class Lease:
    call_id: str
    session_id: str


class InflightCalls:
    def __init__(self, stores: Stores, hot: HotRedis, lease_seconds: float) -> None:
        self.stores = stores
        self.hot = hot
        self.lease_seconds = lease_seconds
        self._calls: dict[str, Lease] = {}
        self._beating_in: int | None = None  # the pid whose heartbeat runs (forked workers start their own)
        # Makes "add a call, is a heartbeat running?" one step against the heartbeat's "no calls
        # left, stop"; removing a call needs no lock (dict.pop is atomic).
        self._lock = threading.Lock()

    def new(self, session_id: str) -> tuple[Lease, float]:
        """A lease for a call about to be admitted, and its first expiry."""
        lease = Lease(os.urandom(16).hex(), session_id)
        pid = os.getpid()
        with self._lock:
            self._calls[lease.call_id] = lease
            start = self._beating_in != pid
            if start:
                self._beating_in = pid
        if start:
            # A heartbeat per process (forked workers start their own); a thread, i.e. a greenlet
            # under gunicorn's gevent workers: it renews the leases while calls wait.
            threading.Thread(target=self._beat, name="polar-call-leases", daemon=True).start()
        return lease, self.expiry()

    def done(self, lease: Lease) -> None:
        self._calls.pop(lease.call_id, None)

    def expiry(self) -> float:
        return time.time() + self.lease_seconds

    def count(self) -> int:
        return len(self._calls)

    def renew_commands(self) -> list[tuple[Any, ...]]:
        expiry = self.expiry()
        cmds: list[tuple[Any, ...]] = [*self.stores.proxy_control.purge_commands()]
        for lease in list(self._calls.values()):
            cmds += self.stores.proxy_control.renew_commands(lease.call_id, expiry)
            cmds += self.stores.sessions.renew_call_commands(lease.session_id, lease.call_id, expiry)
        return cmds

    def _beat(self) -> None:
        while True:
            time.sleep(self.lease_seconds / 3)
            with self._lock:
                if not self._calls:
                    self._beating_in = None  # the next call starts a new heartbeat
                    return
            try:
                self.hot.pipeline(self.renew_commands())
            except Exception as exc:  # Redis away: the next beat retries before the leases lapse
                log.warning("renewing %d call leases failed: %s", self.count(), exc)
