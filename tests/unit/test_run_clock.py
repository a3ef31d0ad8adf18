"""RUN's clock: the agent's limit moves by the time inference was paused (pure: a fake pause clock
and a list for the writes)."""

from __future__ import annotations

import time

from workers.stages.run_clock import WRITE_STEP_SECONDS, RunClock


def clock_with(readings: list[float], limit: float = 60.0, **fields):
    writes: list[dict] = []
    values = iter(readings)
    clock = RunClock(limit, lambda: next(values), writes.append, fields)
    return clock, writes


def test_time_paused_moves_the_limit_and_the_deadline_fields_and_is_never_taken_back():
    clock, writes = clock_with([100.0, 100.0, 103.5, 103.5, 90.0, 103.6], deadline=1000.0, calls_until=None)
    clock.observe()
    assert clock.credit == 0 and writes == []  # no pause: nothing written
    clock.observe()
    assert clock.credit == 3.5
    assert writes == [{"deadline": 1003.5, "run_paused_seconds": 3.5}]  # calls_until unset: not written
    clock.observe()
    clock.observe()  # the clock read lower (a Redis that lost it): the credit stays
    assert clock.credit == 3.5 and len(writes) == 1
    clock.observe()  # grew by less than a step: kept, written at the end
    assert clock.credit == 103.6 - 100.0 and len(writes) == 1
    assert clock.calls_end(50.0) == 50.0 + clock.credit
    clock.finish()
    assert writes[-1] == {"run_paused_seconds": round(103.6 - 100.0, 3)}
    clock.finish()
    assert len(writes) == 2  # nothing more to record


def test_steps_of_the_pause_are_written_as_they_pass():
    readings = [0.0] + [i * WRITE_STEP_SECONDS / 2 for i in range(1, 7)]
    clock, writes = clock_with(readings, deadline=10.0, calls_until=20.0)
    for _ in range(6):
        clock.observe()
    assert [w["run_paused_seconds"] for w in writes] == [round(WRITE_STEP_SECONDS * k, 3) for k in (1, 2, 3)]
    assert writes[-1]["calls_until"] == 20.0 + 3 * WRITE_STEP_SECONDS


def test_the_limit_expires_only_after_the_credit():
    clock, _ = clock_with([0.0, 0.3], limit=0.2)
    assert not clock.expired()
    clock.observe()  # paused 0.3 s meanwhile: the agent has 0.5 s in all
    time.sleep(0.25)
    assert not clock.expired() and not clock.over
    time.sleep(0.3)
    assert clock.expired() and clock.over
