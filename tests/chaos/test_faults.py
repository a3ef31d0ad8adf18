"""Faults injected mid-task into the supervised stack (see conftest.py for what each checks)."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest
import redis

from pipeline.status import Stage
from pipeline.stores.leases import held_many, take_grace_seconds
from tests.chaos.conftest import containers_of, finish_and_report, healthy, task
from tests.support import wait_for
from tests.support_http import Receiver

# stage -> (task options that keep that stage busy for seconds, the status a busy session shows)
STAGE_LOAD = {
    "init": ({"prepare_sleep": 3}, "INITIALIZING"),
    "run": ({"policy": "slow-model"}, "RUNNING"),
    "postrun": ({"samples": 6}, "POSTRUN"),
    "evaluate": ({"evaluate_sleep": 3}, "EVALUATING"),
}


def busy_within(client, task_id: str, status: str, seconds: float) -> bool:
    """Wait until a session of the task shows ``status``; False if none did in time."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if client.status(task_id, results=False).counts.get(status):
            return True
        time.sleep(0.03)
    return False


def stage_running_within(stack, client, task_id: str, stage: Stage, seconds: float) -> bool:
    """Wait until a worker holds the lease of ``stage`` for a session of the task (mid-stage);
    False if none did in time (the fault then lands between stages)."""
    r = redis.Redis.from_url(stack.settings.redis_url)
    sids = [s.session_id for s in client.status(task_id, results=False).sessions]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if any(held_many(r, [(sid, stage) for sid in sids])):
            return True
        time.sleep(0.005)
    return False


@pytest.mark.parametrize("stage", sorted(STAGE_LOAD))
def test_a_stage_worker_killed_mid_task(chaos_stack, chaos_client, stage):
    options, status = STAGE_LOAD[stage]
    task_id = chaos_client.submit(task(**options))
    busy_within(chaos_client, task_id, status, 60)
    mid = stage_running_within(chaos_stack, chaos_client, task_id, Stage(stage), 30)
    name = f"worker-{stage}"
    old = chaos_stack.pid(name)
    faulted = time.monotonic()
    chaos_stack.kill(name)
    wait_for(lambda: chaos_stack.pid(name) not in (None, old), timeout=30)  # the supervisor restarts it
    row = finish_and_report(chaos_stack, chaos_client, f"kill -9 {name}", task_id, faulted, mid, time.monotonic())
    if stage in ("postrun", "evaluate"):
        assert row["completed"] == row["submitted"], row  # Redis-only stages simply run again
    else:
        # a session whose INIT/RUN died ends as ERROR (its agent is never started twice)
        assert row["completed"] >= 1 or mid, row


def test_the_run_worker_killed_while_agents_run_in_containers(chaos_stack, chaos_client, engine):
    """The agents run in podman containers, with a fresh evaluation container warming up beside
    each: kill -9 the run worker mid-session. The containers outlive the worker (the engine owns
    them); the recovery stops the agent, and nothing may be left once the sessions are over."""
    if engine is None:
        pytest.skip("podman is not installed")
    from tests.conftest import TEST_IMAGE

    t = task(policy="slow-model", samples=3)
    t["runtime"].update(backend="docker", image=TEST_IMAGE,
                        eval_prepare=[{"type": "exec", "command": "echo fresh > marker.txt"}])
    t["evaluator"] = {"strategy": "command", "refresh_runtime": True,
                      "config": {"command": "test \"$(cat marker.txt)\" = fresh"}}
    task_id = chaos_client.submit(t)
    busy_within(chaos_client, task_id, "RUNNING", 120)
    mid = stage_running_within(chaos_stack, chaos_client, task_id, Stage.RUN, 30)
    sids = [s.session_id for s in chaos_client.status(task_id, results=False).sessions]
    assert containers_of(chaos_stack, sids)  # what the dead worker will leave running
    old = chaos_stack.pid("worker-run")
    faulted = time.monotonic()
    chaos_stack.kill("worker-run")
    wait_for(lambda: chaos_stack.pid("worker-run") not in (None, old), timeout=30)
    row = finish_and_report(chaos_stack, chaos_client, "kill -9 worker-run (docker runtimes)", task_id, faulted, mid,
                            time.monotonic())
    assert row["completed"] >= 1 or mid, row


def test_redis_killed_mid_task_comes_back_from_its_append_only_file(chaos_stack, chaos_client):
    task_id = chaos_client.submit(task(policy="slow-model"))
    mid = busy_within(chaos_client, task_id, "RUNNING", 60)
    faulted = time.monotonic()
    for _ in range(2):  # twice: the first loss must not leave a process unable to survive the next
        chaos_stack.kill("redis")
        wait_for(lambda: healthy(chaos_stack.settings.api_url) and healthy(chaos_stack.settings.proxy_url),
                 timeout=60)
    back = time.monotonic()
    assert chaos_client.status(task_id, results=False).total_sessions == 4  # the accepted task survived
    after = chaos_client.submit(task(samples=2))  # and the stack takes new work
    finish_and_report(chaos_stack, chaos_client, "kill -9 redis, twice", task_id, faulted, mid, back)
    finish_and_report(chaos_stack, chaos_client, "(task submitted after the Redis restart)", after, faulted, False,
                      back)


def test_proxy_killed_mid_call_then_pause_still_drains(chaos_stack, chaos_client):
    admin = httpx.Client(base_url=chaos_stack.settings.proxy_url, timeout=60,
                         headers={"x-polar-admin-token": chaos_stack.settings.secret("admin_token") or ""})
    task_id = chaos_client.submit(task(policy="slow-model", samples=3))
    mid = bool(wait_for(lambda: admin.get("/admin/status").json()["inflight"] >= 1, timeout=60, interval=0.05))
    old = chaos_stack.pid("proxy")
    faulted = time.monotonic()
    chaos_stack.kill("proxy")
    wait_for(lambda: chaos_stack.pid("proxy") not in (None, old) and healthy(chaos_stack.settings.proxy_url),
             timeout=60)
    back = time.monotonic()
    drained: dict = {}
    try:
        drained = admin.post("/admin/pause", params={"timeout_seconds": 20}).json()
        assert drained["paused"] and drained["drained"], drained  # the dead proxy's calls lapsed
    finally:
        resumed = admin.post("/admin/resume", json={"holder": drained.get("holder")})
    assert resumed.status_code == 200 and not resumed.json()["paused"], resumed.text  # else the stack stays held
    finish_and_report(chaos_stack, chaos_client, "kill -9 proxy (call in flight)", task_id, faulted, mid, back)


def test_callback_worker_killed_mid_post_and_a_receiver_that_fails_for_a_while(chaos_stack, chaos_client):
    slow = Receiver(delay=4)  # the POST hangs while the callback worker is killed
    flaky = Receiver(script=[503, 503, 503])  # then answers
    try:
        killed_task = chaos_client.submit(task(samples=2, callback_url=slow.url))
        flaky_task = chaos_client.submit(task(samples=2, callback_url=flaky.url))
        mid = bool(wait_for(lambda: slow.posts, timeout=120, interval=0.05))
        old = chaos_stack.pid("worker-callback")
        faulted = time.monotonic()
        chaos_stack.kill("worker-callback")
        wait_for(lambda: chaos_stack.pid("worker-callback") not in (None, old), timeout=30)
        back = time.monotonic()
        slow.delay = 0
        for task_id, receiver, fault in ((flaky_task, flaky, "callback receiver answers 503 x3"),
                                         (killed_task, slow, "kill -9 worker-callback mid-POST")):
            finish_and_report(chaos_stack, chaos_client, fault, task_id, faulted, mid, back, callback=True)
            assert len(receiver.delivered_once()) == 1, receiver.posts  # once, as a deduplicating receiver sees it
            assert chaos_client.status(task_id).callback["attempts"] >= 2
    finally:
        slow.close()
        flaky.close()


def test_every_session_of_a_fault_free_task_completes(chaos_stack, chaos_client):
    """The baseline the faults are compared with."""
    task_id = chaos_client.submit(task())
    row = finish_and_report(chaos_stack, chaos_client, "(no fault)", task_id, time.monotonic(), False)
    assert row["completed"] == row["submitted"], row


def test_an_evaluate_worker_stopped_past_its_lease_grades_each_session_once(chaos_stack, chaos_client):
    """SIGSTOP the evaluate worker mid-grading for twice its lease: the reaper sends the stage
    again and, once the worker runs again, a second copy grades while the stalled one finishes.
    The stalled copy must neither write its grade nor tear down the runtime the other grades in
    (it did: the other's evaluator was killed and every session published reward 0)."""
    stop = past_the_lease(chaos_stack)
    # The grading outlasts the stop: the stalled copy's evaluator is still running when the other starts.
    task_id = chaos_client.submit(task(samples=3, evaluate_sleep=stop + 2))
    busy_within(chaos_client, task_id, "EVALUATING", 90)
    mid = stage_running_within(chaos_stack, chaos_client, task_id, Stage.EVALUATE, 30)
    faulted = stall(chaos_stack, "worker-evaluate", stop)
    row = finish_and_report(chaos_stack, chaos_client, "SIGSTOP worker-evaluate past its lease", task_id, faulted, mid,
                            time.monotonic())
    status = chaos_client.status(task_id)
    assert row["completed"] == row["submitted"], row
    assert [r.reward for r in status.results] == [1.0] * row["submitted"], [(r.reward, r.error) for r in status.results]


def test_redis_away_longer_than_the_stage_lease_takes_no_live_stage_from_its_worker(chaos_stack, chaos_client):
    """Redis stopped (SIGSTOP: every client waits) for twice the stage lease while the sessions
    are in INIT's prepare, which needs no Redis: its clock then jumps past every lease. The live
    INIT workers renew theirs within the reaper's grace, so none is taken and sent again (each
    session ended ERROR "init worker lost" though no worker died)."""
    lease = chaos_stack.settings.stage_lease_seconds
    task_id = chaos_client.submit(task(samples=2, prepare_sleep=2 * lease + 12))
    mid = stage_running_within(chaos_stack, chaos_client, task_id, Stage.INIT, 60)
    assert mid
    time.sleep(1)  # (both sessions' INIT under way)
    faulted = stall(chaos_stack, "redis", 2 * lease)
    row = finish_and_report(chaos_stack, chaos_client, "Redis stopped for 2x the stage lease (INIT running)", task_id,
                            faulted, mid, time.monotonic())
    status = chaos_client.status(task_id)
    assert row["completed"] == row["submitted"], [(r.status, r.error) for r in status.results]


def test_init_workers_stalled_past_their_lease_with_the_ready_buffer_full_do_not_stall_init(chaos_stack, chaos_client):
    """Every INIT slot busy preparing a session that holds a READY slot, the buffer full, more of
    the task's INITs queued: SIGSTOP the INIT worker past its lease. The reaper takes the leases
    and sends their INITs again (the recovery: ERROR "init worker lost"), behind the queued ones.
    Once the worker runs again its freed threads take the queued INITs, which wait for a READY
    slot -- held by the lost sessions until their recovery runs, which waited behind them: INIT
    stood still until the slots expired (the budget + 120 s; found by a soak)."""
    settings = chaos_stack.settings
    stop = past_the_lease(chaos_stack)
    t = task(samples=2 * settings.ready_capacity, prepare_sleep=stop + 4)
    task_id = chaos_client.submit(t)
    assert wait_for(lambda: chaos_client.status(task_id, results=False).counts.get("INITIALIZING", 0)
                    == settings.ready_capacity, timeout=60, interval=0.05)
    time.sleep(0.5)  # (every INIT thread in its prepare)
    faulted = stall(chaos_stack, "worker-init", stop)
    # Unstalled: the second half prepares (stop + 4 s) and runs well within a minute; stalled,
    # it waited for the slots' expiry (t["timeout_seconds"] + 120 s).
    row = finish_and_report(chaos_stack, chaos_client, "SIGSTOP worker-init past its lease (READY buffer full)",
                            task_id, faulted, True, time.monotonic(), timeout=3 * stop + 40)
    assert row["completed"] >= settings.ready_capacity, row


def past_the_lease(stack) -> float:
    """A stall long enough for the reaper to take a stage's lease: expired, seen so for the
    grace, then taken by a pass."""
    lease = stack.settings.stage_lease_seconds
    return 2 * lease + take_grace_seconds(lease) + 2 * stack.settings.reaper_interval_seconds


def stall(stack, worker: str, seconds: float) -> float:
    """SIGSTOP ``worker`` for ``seconds``, then SIGCONT; returns when the fault began."""
    pid = stack.pid(worker)
    assert pid is not None
    faulted = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)
    return faulted
