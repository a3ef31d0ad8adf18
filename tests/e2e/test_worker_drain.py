"""A RUN worker stopped the way an orchestrator stops it (SIGTERM: a scale-down, a rollout)
stops taking sessions and lets the agents it runs finish within its soft shutdown timeout
(`polar worker --soft-shutdown-timeout`, 10 s here). Past it the thread pool still waits for the
agent (Celery cannot cancel a thread); the orchestrator's SIGKILL at the end of its grace period
ends it, and the session ends as ERROR, its agent never run twice. So the grace period is what
bounds a drain; docs/sizing.md sizes it."""

from __future__ import annotations

import os
import signal

import redis

from infra.embedded_redis import free_ports
from infra.stack import Stack, StackConfig
from pipeline.client import RolloutClient
from pipeline.settings import Settings
from pipeline.status import SessionStatus, Stage, TaskState
from pipeline.stores.queues import queue_depths
from tests.e2e.conftest import FIXTURES, sleepy_task, wait_for


def _stop_run_worker_when_started(client, stack, task_id: str) -> int:
    sid = client.status(task_id).sessions[0].session_id
    workspace = stack.settings.runtime_root / sid / "workspace"
    wait_for(lambda: (workspace / "started.txt").exists(), timeout=60)
    pid = stack.pid("worker-run")
    assert pid is not None
    os.kill(pid, signal.SIGTERM)  # the worker's main process, as a container runtime signals PID 1
    return pid


def test_a_stopped_run_worker_lets_its_running_agent_finish(client, stack):
    task_id = client.submit(sleepy_task(timeout_seconds=120, policy="drain-policy"))  # the agent sleeps 4 s
    stopped = _stop_run_worker_when_started(client, stack, task_id)
    status = client.wait(task_id, timeout=90, poll_seconds=0.5)
    [result] = status.results
    assert status.status == TaskState.COMPLETED
    assert result.status == SessionStatus.COMPLETED, result.error
    wait_for(lambda: stack.pid("worker-run") not in (None, stopped), timeout=60)  # the supervisor restarts it


def test_an_agent_outliving_the_drain_runs_on_until_the_worker_is_killed(client, stack):
    task_id = client.submit(sleepy_task(timeout_seconds=300))  # the agent sleeps 120 s: beyond the 10 s drain
    stopped = _stop_run_worker_when_started(client, stack, task_id)
    log = stack.children["worker-run"].log_path
    # Past the soft shutdown, Celery's cold shutdown cannot cancel a thread-pool task (celery 5.7:
    # the thread pool does not implement kill_job): the worker waits for it instead of giving it up.
    wait_for(lambda: "does not implement kill_job" in log.read_text(errors="replace"), timeout=60)
    r = redis.Redis.from_url(stack.settings.redis_url)
    assert stack.pid("worker-run") == stopped
    assert queue_depths(r, [Stage.RUN.queue])[Stage.RUN.queue] == 0  # not re-queued: nobody else starts it
    assert client.status(task_id).counts == {"RUNNING": 1}
    stack.kill("worker-run")  # the orchestrator's SIGKILL at the end of the grace period
    status = client.wait(task_id, timeout=90, poll_seconds=0.5)
    [result] = status.results
    assert result.status == SessionStatus.ERROR and "run worker lost" in (result.error or "")
    wait_for(lambda: stack.pid("worker-run") not in (None, stopped), timeout=60)


def test_a_stack_stopped_under_a_running_agent_drains_it_and_restarts_where_it_was(tmp_path, model_dir):
    """`polar up` stopped (Ctrl-C, SIGTERM) while an agent runs: the workers stop first, so the
    agent's last model call still reaches the proxy within their drain (before, the proxy went
    at once and the session was an ERROR blaming the agent's connection error). Started again on
    the same POLAR_HOME, Redis comes back on its port: a client of the first run (a trainer's
    results iterator) carries on."""
    ports = dict(zip(("api", "proxy", "model"), free_ports(3)))
    settings = Settings(home=tmp_path / "home", stage_lease_seconds=6, reaper_interval_seconds=2,
                        api_url=f"http://127.0.0.1:{ports['api']}", proxy_url=f"http://127.0.0.1:{ports['proxy']}",
                        upstream_url=f"http://127.0.0.1:{ports['model']}")
    config = StackConfig(settings=settings, model_dir=model_dir, persist_redis=True, fixed_ports=True,
                         policies={"drain-policy": str(FIXTURES / "drain_policy.json")})
    first = Stack(config).start()
    try:
        client = RolloutClient.from_settings(first.settings)
        task_id = client.submit(sleepy_task(timeout_seconds=120, policy="drain-policy"))  # the agent sleeps 4 s
        sid = client.status(task_id).sessions[0].session_id
        workspace = first.settings.runtime_root / sid / "workspace"
        wait_for(lambda: (workspace / "started.txt").exists(), timeout=60)
    finally:
        first.stop()
    assert (workspace / "finished.txt").exists()  # the agent ran to its end during the drain
    with Stack(config) as second:
        assert second.settings.redis_url == first.settings.redis_url
        status = client.wait(task_id, timeout=90, poll_seconds=0.5)
        [result] = status.results
        assert result.status == SessionStatus.COMPLETED, result.error
        got = [d.result.session_id for d in client.results(group="trainer", consumer="t0", block_ms=200,
                                                             stop_after=1)]
        assert got == [sid]
