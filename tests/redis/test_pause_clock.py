"""The proxy's pause clock in a real Redis: how long inference was paused for weight sync in all,
kept by the hold and release scripts -- across two holders, a renewal, a forced end and a pause
whose last lease lapsed with nobody there to release it."""

import time

import pytest

from pipeline import keys
from pipeline.stores.proxy_control import ProxyControlStore

SLACK = 0.15  # round trips and sleep overshoot on a loaded machine


def test_a_released_pause_adds_its_length_and_time_between_pauses_adds_nothing(r):
    store = ProxyControlStore(r)
    assert store.paused_seconds() == 0
    store.hold_pause("a", 30)
    time.sleep(0.4)
    running = store.paused_seconds()  # the pause going on counts to this moment
    assert 0.4 <= running <= 0.4 + SLACK
    assert store.release_pause("a").verdict == "released"
    first = store.paused_seconds()
    assert 0.4 <= first <= 0.4 + SLACK
    time.sleep(0.3)  # not paused: the clock stands still
    assert store.paused_seconds() == first
    store.hold_pause("b", 30)
    store.hold_pause("c", 30)
    time.sleep(0.3)
    store.hold_pause("b", 60)  # a renewal goes on with the same pause
    store.release_pause("b")
    time.sleep(0.2)  # c still holds it
    store.release_pause("c")
    assert first + 0.5 <= store.paused_seconds() <= first + 0.5 + SLACK


def test_a_pause_that_lapses_unseen_counts_to_its_last_lease_not_to_the_next_read(r):
    store = ProxyControlStore(r)
    store.hold_pause("dead-trainer", 0.3)
    time.sleep(0.7)  # the lease lapsed 0.4 s ago; nothing ran a script since
    assert not store.is_paused()
    assert store.paused_seconds() == pytest.approx(0.3, abs=0.01)
    store.hold_pause("next", 30)  # the lapsed pause is folded in; a new one starts now
    assert r.hget(keys.PROXY_PAUSE_CLOCK, "total") == b"300"
    time.sleep(0.2)
    store.release_pause("next", force=True)
    assert 0.5 <= store.paused_seconds() <= 0.5 + SLACK


def test_a_sessions_waits_count_once_however_many_of_its_calls_wait_and_only_for_a_session_that_exists(r):
    from pipeline.schemas import SessionSpec, TaskRequest
    from pipeline.stores.sessions import SessionStore

    store = SessionStore(r)
    spec = SessionSpec.expand(TaskRequest.model_validate({"instruction": "x", "agent": {"custom_shell": "true"}}))[0]
    store.register(spec)
    sid = spec.session_id
    assert store.run_poll(sid) == (False, 0.0, False)
    store.park(sid, True)
    time.sleep(0.2)
    store.park(sid, True)  # a sub-agent's call waits too: the same span
    time.sleep(0.2)
    assert 0.4 <= store.run_poll(sid)[1] <= 0.4 + SLACK  # the wait going on counts
    store.park(sid, False)
    time.sleep(0.1)
    store.park(sid, False)
    done = store.run_poll(sid)[1]
    assert 0.5 <= done <= 0.5 + SLACK
    store.park(sid, False)  # one too many (a mark written twice): no negative count, nothing added
    time.sleep(0.1)
    assert store.run_poll(sid)[1] == done
    store.park("sess-gone", True)
    assert not r.exists(keys.session("sess-gone"))


def test_a_wait_mark_a_killed_proxy_left_stops_counting_and_is_closed_by_the_next_wait(r, monkeypatch):
    """A proxy killed while a call of the session waited never ends its mark: the wait counts only
    while a proxy keeps the mark fresh (every parked call refreshes it), so the session is not
    credited every later pause it spends busy with its own commands; the next wait starts anew."""
    from pipeline.schemas import SessionSpec, TaskRequest
    from pipeline.stores import sessions as sessions_mod
    from pipeline.stores.sessions import SessionStore

    monkeypatch.setattr(sessions_mod, "PARK_STALE_SECONDS", 0.3)
    store = SessionStore(r)
    spec = SessionSpec.expand(TaskRequest.model_validate({"instruction": "x", "agent": {"custom_shell": "true"}}))[0]
    store.register(spec)
    sid = spec.session_id
    store.park(sid, True)
    for _ in range(3):  # a live wait: its proxy refreshes the mark
        time.sleep(0.2)
        store.park(sid, None)
    assert 0.6 <= store.run_poll(sid)[1] <= 0.6 + SLACK
    time.sleep(1.0)  # ... then its proxy is killed: the mark is never ended nor refreshed
    left = store.run_poll(sid)[1]
    assert 0.85 <= left <= 0.9 + SLACK  # counted to the last refresh and its grace only
    store.park(sid, True)  # a later wait (the agent's retry, or its next call): a span of its own
    time.sleep(0.2)
    store.park(sid, False)
    assert 1.05 <= store.run_poll(sid)[1] <= 1.1 + SLACK
    assert r.hget(keys.session(sid), "parked") == b"0"  # no mark left over
