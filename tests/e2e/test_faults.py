"""Bad input, cancellation, timeouts and redelivery against the real stack."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import openai
import pytest
import redis

from pipeline import keys
from pipeline.celery_app import dispatch, make_app
from pipeline.client import RolloutError
from pipeline.status import SessionStatus, Stage, TaskState
from tests.e2e.conftest import sleepy_task, wait_for


@pytest.fixture(scope="module")
def rds(stack):
    return redis.Redis.from_url(stack.settings.redis_url)


# --- bad input -------------------------------------------------------------------------------

def test_unknown_session_gets_openai_404(stack):
    for base, key in ((f"{stack.settings.proxy_url}/s/sk-polar-nope/v1", "x"),
                      (f"{stack.settings.proxy_url}/v1", "sk-polar-nope")):
        sdk = openai.OpenAI(base_url=base, api_key=key, max_retries=0)
        with pytest.raises(openai.NotFoundError) as info:
            sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert info.value.body["code"] == "session_not_found"
        assert "sk-polar-nope" in info.value.body["message"]


def test_malformed_json_to_the_api_and_the_proxy(stack, client, demo_task):
    resp = httpx.post(f"{stack.settings.api_url}/rollout/task/submit", content=b"{not json",
                      headers={"content-type": "application/json"})
    assert resp.status_code == 400 and resp.json()["error"]["type"] == "malformed_json"
    # The proxy needs a live session to get as far as parsing: use one that is running.
    task = sleepy_task(timeout_seconds=60)
    task_id = client.submit(task)
    sid = client.status(task_id).sessions[0].session_id
    wait_for(lambda: client.status(task_id, results=False).counts.get("RUNNING"))
    resp = httpx.post(f"{stack.settings.proxy_url}/s/{sid}/v1/chat/completions", content=b'{"messages": [',
                      headers={"content-type": "application/json"})
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["type"] == "invalid_request_error" and "malformed JSON" in err["message"]
    sdk = openai.OpenAI(base_url=f"{stack.settings.proxy_url}/s/{sid}/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        sdk.chat.completions.create(model="m", messages=[])
    assert info.value.body["param"] == "messages"
    client.cancel(task_id)
    client.wait(task_id, timeout=60, results=False)


def test_invalid_task_request_names_the_field_and_creates_nothing(client, demo_task, rds):
    demo_task["runtime"]["backend"] = "dokcer"
    demo_task["timout_seconds"] = 3
    with pytest.raises(RolloutError) as info:
        client.submit(demo_task)
    assert info.value.status == 400
    fields = {f["field"] for f in info.value.body["error"]["fields"]}
    assert {"runtime.backend", "timout_seconds"} <= fields
    assert not rds.exists(keys.task(demo_task["task_id"]))


def test_duplicate_task_id_is_a_conflict(client, demo_task):
    demo_task["num_samples"] = 1
    client.submit(demo_task)
    with pytest.raises(RolloutError) as info:
        client.submit(demo_task)
    assert info.value.status == 409
    client.wait(demo_task["task_id"], timeout=120, results=False)


def test_unknown_task_is_404(client):
    with pytest.raises(RolloutError) as info:
        client.status("no-such-task")
    assert info.value.status == 404


# --- timeout and cancel ----------------------------------------------------------------------

def test_timeout_kills_the_agent_and_keeps_a_partial_trajectory(client):
    task = sleepy_task(timeout_seconds=8)
    task_id = client.submit(task)
    status = client.wait(task_id, timeout=120, poll_seconds=0.3)
    [result] = status.results
    assert result.status == SessionStatus.TIMEOUT
    assert "budget" in (result.error or "")
    # The one model call made before the agent hung is kept, token-faithful.
    [trace] = result.trajectory.traces
    assert trace.response_ids and len(trace.response_logprobs) == len(trace.response_ids)
    assert result.reward == 0.0
    assert result.timing.durations_ms["run"] < 60_000


def test_cancel_tears_the_runtime_down(client, stack):
    task = sleepy_task(timeout_seconds=300, samples=2)
    task_id = client.submit(task)
    sids = [s.session_id for s in client.status(task_id).sessions]
    runtime_dirs = [stack.settings.runtime_root / sid for sid in sids]
    wait_for(lambda: all((d / "workspace" / "started.txt").exists() for d in runtime_dirs), timeout=60)
    pids = [int(p.name) for d in runtime_dirs for p in (d / ".pids").iterdir()]
    assert pids
    started = time.monotonic()
    assert client.cancel(task_id)["status"] == "cancelling"
    status = client.wait(task_id, timeout=60, poll_seconds=0.2)
    assert time.monotonic() - started < 30
    assert status.status == TaskState.CANCELLED
    assert {r.status for r in status.results} == {SessionStatus.CANCELLED}
    assert all(len(r.trajectory.traces) == 1 for r in status.results)  # partial work kept
    assert not any(d.exists() for d in runtime_dirs)
    wait_for(lambda: not any(_alive(pid) for pid in pids), timeout=10)


def test_cancel_before_start_never_runs_the_agent(client, stack, rds):
    task = sleepy_task(timeout_seconds=300, samples=8)  # more than READY can hold at once
    task_id = client.submit(task)
    client.cancel(task_id)
    status = client.wait(task_id, timeout=60, poll_seconds=0.2)
    assert status.status == TaskState.CANCELLED
    assert {r.status for r in status.results} == {SessionStatus.CANCELLED}
    assert rds.llen(keys.READY_LIST) == 0


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


# --- redelivery ------------------------------------------------------------------------------

def test_redelivered_stage_tasks_do_not_run_or_publish_twice(client, demo_task, stack, rds):
    demo_task["num_samples"] = 1
    task_id = client.submit(demo_task)
    status = client.wait(task_id, timeout=120)
    sid = status.results[0].session_id
    entry_id = rds.get(keys.session_published(sid))
    completions = rds.llen(keys.session_completions(sid))
    app = make_app(stack.settings)
    for stage in Stage:  # Celery delivers every stage again
        dispatch(app, stage, sid)
    time.sleep(3)
    wait_for(lambda: sum(rds.llen(s.queue) for s in Stage) == 0, timeout=30)
    time.sleep(1)
    entries = [f for _, f in rds.xrange(keys.RESULTS_STREAM) if f[b"session_id"].decode() == sid]
    assert len(entries) == 1
    assert rds.get(keys.session_published(sid)) == entry_id
    assert rds.llen(keys.session_completions(sid)) == completions  # the agent did not run again
    after = client.status(task_id)
    assert after.counts == {"COMPLETED": 1} and after.finished_sessions == 1


def test_duplicate_run_delivery_while_running_is_dropped(client, stack, rds):
    task = sleepy_task(timeout_seconds=15)
    task_id = client.submit(task)
    sid = client.status(task_id).sessions[0].session_id
    wait_for(lambda: (stack.settings.runtime_root / sid / "workspace" / "started.txt").exists(), timeout=60)
    app = make_app(stack.settings)
    dispatch(app, Stage.RUN, sid)
    dispatch(app, Stage.INIT, sid)
    status = client.wait(task_id, timeout=120, poll_seconds=0.3)
    [result] = status.results
    assert result.status == SessionStatus.TIMEOUT
    assert rds.llen(keys.session_completions(sid)) == 1  # one agent run, one model call


# --- Flower ----------------------------------------------------------------------------------

def test_flower_sees_every_stage_queue_and_worker(client, demo_task, stack):
    flower = f"http://127.0.0.1:{stack.config.flower_port}"
    demo_task["num_samples"] = 2
    task_id = client.submit(demo_task)
    workers = httpx.get(f"{flower}/api/workers", params={"refresh": "1"}, timeout=30).json()
    queues_by_worker = {name: {q["name"] for q in info.get("active_queues", [])} for name, info in workers.items()}
    assert {q for qs in queues_by_worker.values() for q in qs} == {s.queue for s in Stage}
    assert {name.split("@")[0] for name in workers} == {s.value for s in Stage}
    lengths = httpx.get(f"{flower}/api/queues/length", timeout=30).json()
    assert {q["name"] for q in lengths["active_queues"]} == {s.queue for s in Stage}
    client.wait(task_id, timeout=120, results=False)

    def seen_all_stages():
        tasks = httpx.get(f"{flower}/api/tasks", timeout=30).json()
        return {t["name"] for t in tasks.values()} >= {s.task_name for s in Stage}

    wait_for(seen_all_stages, timeout=30, interval=0.5)
