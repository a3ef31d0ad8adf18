"""RUN's clock: the agent's limit moves by the time its calls waited out weight-sync pauses, as far
as the proxy's pause clock grew (pure: fake readings and a list for the writes)."""

from __future__ import annotations

import time

from workers.stages.run_clock import WRITE_STEP_SECONDS, RunClock


def clock_with(paused: list[float], limit: float = 60.0, parked_base: float = 0.0, **fields):
    writes: list[dict] = []
    values = iter(paused)
    clock = RunClock(limit, lambda: next(values), parked_base, writes.append, fields)
    return clock, writes


def test_time_waited_moves_the_limit_and_the_deadline_fields_and_is_never_taken_back():
    clock, writes = clock_with([100.0, 103.5, 103.5, 110.0], parked_base=1.0, deadline=1000.0, calls_until=None)
    clock.observe(1.0)
    assert clock.credit == 0 and writes == []  # nothing waited: the pause clock is not even read
    clock.observe(4.5)
    assert clock.credit == 3.5
    assert writes == [{"deadline": 1003.5, "run_paused_seconds": 3.5}]  # calls_until unset: not written
    clock.observe(2.0)  # read lower (a Redis that lost it): the credit stays
    assert clock.credit == 3.5 and len(writes) == 1
    clock.observe(6.0)  # waited 5 s, but the pause clock grew 3.5 s only: a stale mark is not believed
    assert clock.credit == 3.5 and len(writes) == 1
    clock.observe(4.6)  # grew by less than a step (the clock allows 10 s now): kept, written at the end
    assert round(clock.credit, 9) == 3.6 and len(writes) == 1
    assert clock.calls_end() == 1000.0 + clock.credit  # the deadline (calls_until unset)
    clock.finish()
    assert writes[-1] == {"run_paused_seconds": 3.6}
    clock.finish()
    assert len(writes) == 2  # nothing more to record


def test_steps_of_the_wait_are_written_as_they_pass():
    clock, writes = clock_with([0.0] + [100.0] * 6, deadline=10.0, calls_until=20.0)
    for k in range(1, 7):
        clock.observe(k * WRITE_STEP_SECONDS / 2)
    assert [w["run_paused_seconds"] for w in writes] == [round(WRITE_STEP_SECONDS * k, 3) for k in (1, 2, 3)]
    assert writes[-1]["calls_until"] == 20.0 + 3 * WRITE_STEP_SECONDS


def test_the_limit_expires_only_after_the_credit():
    clock, _ = clock_with([0.0, 0.3], limit=0.2)
    assert not clock.expired()
    clock.observe(0.3)  # waited 0.3 s meanwhile: the agent has 0.5 s in all
    time.sleep(0.25)
    assert not clock.expired() and not clock.over
    time.sleep(0.3)
    assert clock.expired() and clock.over


def test_recording_the_credit_at_the_end_never_raises_over_the_agents_result():
    def broken(fields):
        raise ConnectionError("Redis went away")

    clock = RunClock(60.0, iter([0.0, 5.0]).__next__, 0.0, broken, {})
    clock.observe(0.1)  # under a step: kept for the end
    clock.finish()
    assert clock.credit == 0.1
