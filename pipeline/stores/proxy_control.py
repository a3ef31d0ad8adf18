"""Weight-sync state shared by every proxy process: the pause (its holders and the flag model
calls read), the policy version stamped on records, and the upstream calls in flight across all
proxies.

A pause is held, not set: each holder (a trainer) holds it under a lease it renews by pausing
again, and the flag lives exactly as long as the latest live lease (``lua.PROXY_PAUSE_*``). A
trainer that dies while paused releases the fleet when its lease lapses; one holder's resume
never ends another's pause.

In-flight calls are leases, not a counter: a sorted set of call ids scored by lease expiry, which
the proxy holding a call renews while it runs. A proxy that dies stops renewing, so its calls
stop counting within one lease period and ``pause`` can still drain after any crash.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from pipeline import keys
from pipeline.codec import text
from pipeline.stores import lua

Command = tuple[Any, ...]


@dataclass(frozen=True)
class Holds:
    """The live pause holds: how many, and when the soonest and the latest lapse (epoch seconds)."""

    count: int = 0
    soonest: float | None = None
    latest: float | None = None

    @classmethod
    def of(cls, count: Any, soonest_ms: Any, latest_ms: Any) -> "Holds":
        if not int(count):
            return cls()
        return cls(int(count), int(soonest_ms) / 1000, int(latest_ms) / 1000)

    def view(self) -> dict[str, Any]:
        return {"holders": self.count, "lease_expires_soonest": self.soonest, "lease_expires_latest": self.latest}


@dataclass(frozen=True)
class Release:
    """What a resume did: ``verdict`` 'released', or why nothing was written ('ambiguous', 'backwards',
    'unknown', 'inflight'); the holds left (or found), the calls in flight when that refused it."""

    verdict: str
    holds: Holds
    inflight: int = 0


@dataclass(frozen=True)
class ControlState:
    paused: bool
    policy_version: str | None
    inflight: int
    holds: Holds

    def view(self) -> dict[str, Any]:
        """As the proxy's /admin/status and the API's /rollout/status report it."""
        return {"paused": self.paused, "policy_version": self.policy_version, "inflight": self.inflight,
                **self.holds.view()}


class ProxyControlStore:
    def __init__(self, r: redis.Redis) -> None:
        self._r = r
        self._hold = lua.bind(r, lua.PROXY_PAUSE_HOLD)
        self._release = lua.bind(r, lua.PROXY_PAUSE_RELEASE)

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

    def paused_seconds(self) -> float:
        """How long inference has been paused for weight sync in all, the pause going on
        included (to this moment, or to its last lease if it lapsed unseen): grows only while
        paused, so two reads bound the pause time between them."""
        pipe = self._r.pipeline(transaction=False)
        self.queue_pause_clock(pipe)
        pipe.time()  # the clock's marks are Redis TIME: the worker's clock would add its skew
        row, now = pipe.execute()
        return self.parse_paused_seconds(row, now)

    @staticmethod
    def queue_pause_clock(pipe: Any) -> None:
        """Add to ``pipe`` the read ``parse_paused_seconds`` decodes (with a Redis TIME queued too)."""
        pipe.hmget(keys.PROXY_PAUSE_CLOCK, "total", "since", "until")

    @staticmethod
    def parse_paused_seconds(row: list[Any], now: tuple[int, int]) -> float:
        """``queue_pause_clock``'s reply, against Redis's TIME ``now`` (seconds, microseconds)."""
        (total, since, until), (sec, usec) = row, now
        ms = float(total or 0)
        if since and int(since):
            ms += max(0.0, min(sec * 1000 + usec / 1000, int(until or 0)) - int(since))
        return ms / 1000

    def exit(self, call_id: str) -> None:
        self._r.zrem(keys.PROXY_CALLS, call_id)

    def hold_pause(self, holder: str, lease_seconds: float) -> tuple[float, Holds]:
        """Pause (or renew ``holder``'s hold) for ``lease_seconds``; returns when this hold lapses
        (epoch seconds, Redis's clock) and the holds now live."""
        expiry, *holds = self._hold(keys=[keys.PROXY_PAUSE_HOLDERS, keys.PROXY_PAUSED, keys.PROXY_PAUSE_CLOCK],
                                    args=[holder, max(1, round(lease_seconds * 1000))])
        return int(expiry) / 1000, Holds.of(*holds)

    def release_pause(self, holder: str | None, policy_version: str | None = None, force: bool = False) -> Release:
        """End ``holder``'s hold (None: the only one's), setting ``policy_version`` in the same
        step; ``force`` ends every hold and skips the checks (``lua.PROXY_PAUSE_RELEASE``)."""
        verdict, count, soonest, latest, running = self._release(
            keys=[keys.PROXY_PAUSE_HOLDERS, keys.PROXY_PAUSED, keys.PROXY_POLICY_VERSION, keys.PROXY_CALLS,
                  keys.PROXY_PAUSE_CLOCK],
            args=[holder or "", "1" if force else "0", policy_version or "", repr(time.time())])
        return Release(text(verdict), Holds.of(count, soonest, latest), int(running))

    def inflight(self) -> int:
        """Calls in flight on live proxies; lapsed leases (dead proxies) are purged."""
        pipe = self._r.pipeline(transaction=False)
        _count_inflight(pipe)
        return int(pipe.execute()[1])

    def read(self) -> ControlState:
        """The pause, policy version and calls in flight. Holds are counted against Redis's
        clock, as the scripts count them (a lapsed one not yet dropped is not counted)."""
        pipe = self._r.pipeline(transaction=False)
        pipe.mget(keys.PROXY_PAUSED, keys.PROXY_POLICY_VERSION)
        pipe.hvals(keys.PROXY_PAUSE_HOLDERS)
        pipe.time()
        _count_inflight(pipe)  # in the same round trip
        (paused, version), expiries, (seconds, micros), _, inflight = pipe.execute()
        now_ms = seconds * 1000 + micros // 1000
        live = sorted(int(e) for e in expiries if int(e) > now_ms)
        holds = Holds.of(len(live), live[0], live[-1]) if live else Holds()
        return ControlState(bool(paused), text(version) if version else None, int(inflight), holds)


def _count_inflight(pipe: Any) -> None:
    """Queue the purge of lapsed call leases (dead proxies), then the count of the live ones."""
    pipe.zremrangebyscore(keys.PROXY_CALLS, "-inf", repr(time.time()))
    pipe.zcard(keys.PROXY_CALLS)
