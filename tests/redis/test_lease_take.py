"""The reaper's take of expired leases against a real Redis: a lease is taken only once a pass
has seen it expired -- the same expiry, never renewed -- for the grace (a Redis outage makes every
live lease look expired at once; their holders renew them in that time), and what was renewed
or released is forgotten."""

from __future__ import annotations

import time

from pipeline import keys
from pipeline.status import Stage
from pipeline.stores.leases import StageLease, take_expired, take_grace_seconds


def lapsed(r, sid: str) -> StageLease:
    lease = StageLease(r, sid, Stage.RUN, ttl_seconds=0.05)
    assert lease.acquire()
    lease.stop_heartbeat()  # (as while Redis is away: nobody renews)
    time.sleep(0.1)
    return lease


def test_an_expired_lease_is_taken_only_after_the_grace(r):
    lapsed(r, "s1")
    assert take_expired(r, 0.3) == []  # first seen expired
    assert take_expired(r, 0.3) == []  # still within the grace
    time.sleep(0.35)
    assert take_expired(r, 0.3) == [("s1", Stage.RUN)]
    assert take_expired(r, 0.3) == [] and r.hlen(keys.LEASE_SEEN_EXPIRED) == 0


def test_a_lease_renewed_within_the_grace_is_not_taken_and_a_later_lapse_starts_it_again(r):
    lease = lapsed(r, "s2")
    assert take_expired(r, 0.3) == []
    lease._confirm()  # the holder is back: a lease that lapsed with nobody taking it is still its own
    lease.stop_heartbeat()
    time.sleep(0.35)
    assert take_expired(r, 0.3) == []  # lapsed again since: a new expiry, seen for the first time
    time.sleep(0.35)
    assert take_expired(r, 0.3) == [("s2", Stage.RUN)]


def test_a_released_lease_is_forgotten_and_no_grace_takes_at_once(r):
    lease = lapsed(r, "s3")
    assert take_expired(r, 0.3) == [] and r.hlen(keys.LEASE_SEEN_EXPIRED) == 1
    lease.release()
    assert take_expired(r, 0.3) == [] and r.hlen(keys.LEASE_SEEN_EXPIRED) == 0
    lapsed(r, "s4")
    assert take_expired(r) == [("s4", Stage.RUN)]  # grace 0: every expired lease now


def test_the_grace_outlasts_a_reconnecting_holder():
    assert take_grace_seconds(30) == 15 and take_grace_seconds(4) >= 6  # the client's retries wait up to 5 s apart
