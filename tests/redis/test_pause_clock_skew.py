"""The pause credit when the worker's clock is not Redis's: the marks are Redis TIME, so reading
them against the worker's own clock turned the skew into credit (a worker 5 minutes ahead got
5 minutes of budget back from every pause its agent's call waited out)."""

import time
import types

import pytest

from pipeline.schemas import SessionSpec, TaskRequest
from pipeline.stores import proxy_control as proxy_control_module
from pipeline.stores import sessions as sessions_module
from pipeline.stores.proxy_control import ProxyControlStore
from pipeline.stores.sessions import SessionStore
from workers.stages.run_clock import RunClock

SLACK = 0.3


@pytest.mark.parametrize("skew", [300.0, -300.0])
def test_a_worker_clock_off_from_redis_gives_no_credit_beyond_the_wait(r, monkeypatch, skew):
    sessions, control = SessionStore(r), ProxyControlStore(r)
    spec = SessionSpec.expand(TaskRequest.model_validate({"instruction": "x", "agent": {"custom_shell": "true"}}))[0]
    sessions.register(spec)
    sid = spec.session_id
    real = time.time
    skewed = types.SimpleNamespace(time=lambda: real() + skew)
    monkeypatch.setattr(sessions_module, "time", skewed)
    monkeypatch.setattr(proxy_control_module, "time", skewed)
    writes: list[dict] = []
    clock = RunClock(600.0, control.paused_seconds, sessions.run_poll(sid)[1], writes.append, {"deadline": 1e10})
    control.hold_pause("trainer", 600)
    sessions.park(sid, True)
    time.sleep(0.3)
    clock.observe(sessions.run_poll(sid)[1])  # a poll while the call waits
    during = clock.credit
    sessions.park(sid, False)
    control.release_pause("trainer")
    clock.observe(sessions.run_poll(sid)[1])
    assert 0.3 <= clock.credit <= 0.3 + SLACK, (during, clock.credit)
