"""Polar's dispatch_priority on a stack where INIT is the bottleneck (2 INIT workers, a slow
prepare step, READY and run slots to spare): a session's INIT starts when its message is taken
from the queue, so the order of INIT starts is the order the broker served the messages in.
(Where READY slots are the bottleneck, sessions already holding an INIT worker race for a slot,
and that race ignores priority.)"""

from __future__ import annotations

import copy

import pytest

from infra.stack import Stack, StackConfig
from pipeline.client import RolloutClient
from pipeline.settings import Settings
from pipeline.status import SessionStatus, Stage
from tests.e2e.conftest import EXAMPLES
from tests.support import wait_for


@pytest.fixture(scope="module")
def init_bound(tmp_path_factory, model_dir):
    settings = Settings(home=tmp_path_factory.mktemp("prio-home"), ready_capacity=16)
    with Stack(StackConfig(settings=settings, model_dir=model_dir, concurrency={Stage.INIT: 2, Stage.RUN: 8},
                           policies={"demo-policy": str(EXAMPLES / "demo_policy.json")})) as stack:
        yield RolloutClient.from_settings(stack.settings)


def test_a_higher_dispatch_priority_is_served_before_sessions_queued_earlier(init_bound, demo_task):
    demo_task["runtime"]["prepare"].append({"type": "exec", "command": "sleep 1.5"})
    low = copy.deepcopy(demo_task)
    low.update(num_samples=10, task_id=demo_task["task_id"] + "-low")
    low_id = init_bound.submit(low)
    # Once the INIT workers are busy and low-priority messages wait behind them.
    wait_for(lambda: init_bound.status(low_id, results=False).counts.get("REGISTERED", 0) >= 6, timeout=60,
             interval=0.05)
    wait_for(lambda: init_bound.status(low_id, results=False).counts.get("INITIALIZING", 0) >= 2, timeout=60,
             interval=0.05)
    high = copy.deepcopy(demo_task)
    high.update(num_samples=2, task_id=demo_task["task_id"] + "-high", dispatch_priority=100)
    high_id = init_bound.submit(high)
    lows = init_bound.wait(low_id, timeout=300, poll_seconds=0.5).results
    highs = init_bound.wait(high_id, timeout=300, poll_seconds=0.5).results
    last_high = max(r.timing.init_started_at for r in highs)
    after = [r for r in lows if r.timing.init_started_at > last_high]
    # Without the priority both would wait behind every low message still queued (>= 4 of them).
    assert len(after) >= 2, sorted((r.timing.init_started_at, r in highs) for r in lows + highs)
    assert {r.status for r in lows + highs} == {SessionStatus.COMPLETED}
