"""Weight-sync control shared by every proxy process through Redis (``ProxyControlStore``):
pause (new model calls wait, calls in flight drain), resume (optionally with a new policy
version, stamped on every record from then on).

Each pause has a holder and a lease: pausing again with the same holder renews it, a resume ends
only its own holder's pause (the proxy stays paused while others hold it), and a pause nobody
renews lapses by itself -- a trainer killed mid-update does not hold the fleet for ever."""

from __future__ import annotations

import secrets
import time
from typing import Any, Callable

from pipeline.stores.proxy_control import ProxyControlStore, Release
from proxy.errors import ClientGone, Conflict, UpstreamTimeout

POLL_SECONDS = 0.05
PARK_REFRESH_SECONDS = 1.0  # a waiting call refreshes its session's mark (sessions.PARK_STALE_SECONDS)
# A call arriving during a pause holds a lease for one round trip before it sees the flag and
# steps out: a resume setting a version asks again for this long before refusing over them.
RESUME_SETTLE_SECONDS = 1.0
# What ``entered(park=True)`` returns for a call that found the proxy paused (no version can be
# this: versions are printable ASCII).
PARKED = "\x00parked"


class Control:
    def __init__(self, store: ProxyControlStore, default_policy_version: str | None = None) -> None:
        self.store = store
        self.default_policy_version = default_policy_version
        self._flag_at, self._flag = -POLL_SECONDS, False

    def paused(self) -> bool:
        """The pause flag as every call parked in this process sees it: read from Redis at most
        once a poll interval for all of them (a thousand parked calls polled it 20k times a
        second). A stale answer costs nothing: a call enters again only after a fresh read of
        the flag inside its enter."""
        now = time.monotonic()
        if now - self._flag_at >= POLL_SECONDS:
            self._flag_at = now  # first: the calls waking meanwhile keep the last answer, not read again
            self._flag = self.store.is_paused()
        return self._flag

    def entered(self, replies: list[Any], call_id: str, lease: Callable[[], float], max_wait: float,
                still_wanted: Callable[[], Any] = lambda: None, park: bool = False,
                parked: Callable[[bool | None], None] = lambda on: None) -> str | None:
        """The policy version for a call that entered (``replies`` of the store's enter
        commands); while paused, the call steps out and waits holding no lease (so a pause
        taken meanwhile drains) -- or, with ``park``, steps out and returns ``PARKED`` at once,
        to wait in ``wait_out`` where its caller can keep a stream alive meanwhile."""
        _, paused, version = replies
        if not paused:
            return (version.decode() if version else None) or self.default_policy_version
        if park:
            self.store.exit(call_id)
            return PARKED
        return self.step_out(call_id, lease, max_wait, still_wanted, lambda: False, parked)

    def step_out(self, call_id: str, lease: Callable[[], float], max_wait: float,
                 still_wanted: Callable[[], Any], gone: Callable[[], bool],
                 parked: Callable[[bool | None], None]) -> str | None:
        """A call that entered and has sampled nothing yet leaves the pause's drain and waits the
        pause out (``wait_out``), then enters again; returns the version it samples under."""
        self.store.exit(call_id)
        return self.wait_out(call_id, lease, max_wait, still_wanted, gone, parked)

    def wait_out(self, call_id: str, lease: Callable[[], float], max_wait: float,
                 still_wanted: Callable[[], Any] = lambda: None,
                 gone: Callable[[], bool] = lambda: False,
                 parked: Callable[[bool | None], None] = lambda on: None) -> str | None:
        """Wait, holding no lease, until the pause clears, then enter again; the enter re-reads
        the flag after its lease is in, so a pause that lands in between is either seen by the
        call or counts the call. After a wait, ``still_wanted()`` raises when the call's session
        ended meanwhile (its budget ran out while it was parked). ``gone()``, asked at every
        poll, says the caller closed its connection (an agent killed at its deadline or
        cancelled while its call was parked): the call leaves at once, so it stops counting in
        its session's calls in flight (POSTRUN's drain waited for it until the resume).
        ``parked(True)`` before the wait and ``parked(False)`` after it mark the time the call's
        session spends held up (not charged to its agent); ``parked(None)`` every
        ``PARK_REFRESH_SECONDS`` meanwhile says the wait goes on (a proxy killed mid-wait stops
        saying it, and its mark stops counting)."""
        parked(True)
        try:
            return self._wait(call_id, lease, max_wait, still_wanted, gone, lambda: parked(None))
        finally:
            parked(False)

    def _wait(self, call_id: str, lease: Callable[[], float], max_wait: float, still_wanted: Callable[[], Any],
              gone: Callable[[], bool], refresh: Callable[[], None]) -> str | None:
        parked = time.monotonic()
        deadline = parked + max_wait
        refresh_at = parked + PARK_REFRESH_SECONDS
        while True:
            while True:
                if time.monotonic() >= refresh_at:
                    refresh_at = time.monotonic() + PARK_REFRESH_SECONDS
                    refresh()
                if time.monotonic() > deadline:
                    raise UpstreamTimeout(f"inference is paused for weight sync and did not resume in time "
                                          f"(parked {time.monotonic() - parked:.0f} s)")
                time.sleep(POLL_SECONDS)
                if gone():
                    raise ClientGone("the client closed its connection while its call waited out a weight-sync "
                                     "pause; nothing was sampled")
                if not self.paused():
                    break
            still_wanted()
            paused, version = self.store.enter(call_id, lease())
            if not paused:
                return version or self.default_policy_version
            self.store.exit(call_id)

    def pause(self, timeout: float, lease_seconds: float, holder: str | None = None) -> dict[str, Any]:
        """Hold the pause as ``holder`` (a new id when None) for ``lease_seconds`` and wait up to
        ``timeout`` for the calls in flight to drain (no longer than the hold itself lasts)."""
        holder = holder or f"pause-{secrets.token_hex(8)}"
        expires_at, _ = self.store.hold_pause(holder, lease_seconds)
        deadline = time.monotonic() + min(timeout, lease_seconds)
        while self.store.inflight() > 0 and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        return {**self.status(), "holder": holder, "lease_seconds": lease_seconds, "lease_expires_at": expires_at}

    def resume(self, holder: str | None = None, policy_version: str | None = None,
               force: bool = False) -> dict[str, Any]:
        """End ``holder``'s pause (None: the only holder's) and set ``policy_version``, in one
        step; raises ``Conflict`` when that would end another's pause or stamp the new version
        while calls admitted under the old one still run, unless ``force`` (ends every hold)."""
        # Asked again while only calls stepping out remain (each holds a lease for one round trip
        # before it sees the flag): a count taken before the script could miss one arriving.
        settle = time.monotonic() + RESUME_SETTLE_SECONDS
        done = self.store.release_pause(holder, policy_version, force)
        while done.verdict == "inflight" and time.monotonic() < settle:
            time.sleep(POLL_SECONDS)
            done = self.store.release_pause(holder, policy_version, force)
        if done.verdict == "backwards":  # staleness (current - sampled) would go negative
            raise Conflict(f"policy_version {policy_version} is older than the current "
                           f"{self.store.read().policy_version}: integer versions only move forward (pass "
                           "\"force\": true to set it anyway)", code="policy_version_backwards")
        if done.verdict != "released":
            raise _refusal(done, holder)
        return self.status()

    def status(self) -> dict[str, Any]:
        state = self.store.read().view()
        return {**state, "drained": state["inflight"] == 0,
                "policy_version": state["policy_version"] or self.default_policy_version}


def _refusal(done: Release, holder: str | None) -> Conflict:
    held = done.holds.count
    if done.verdict == "ambiguous":
        return Conflict(f"{held} holders hold the pause: name yours as \"holder\" (its pause answered it), or "
                        "pass \"force\": true to end every hold", code="pause_holder_ambiguous")
    if done.verdict == "unknown":
        return Conflict(f"holder {holder!r} holds no pause (its lease lapsed, or it never paused); {held} "
                        f"holder(s) hold it now. Pass \"force\": true to end every hold", code="pause_not_held")
    return Conflict(f"{done.inflight} call(s) admitted under the old policy version are still in flight; wait "
                    "(pause again to drain), or pass \"force\": true", code="calls_in_flight")
