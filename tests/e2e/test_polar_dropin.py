"""Polar's clients against this API, unchanged: a payload written with Polar's field names, and
the slime bridge's way of waiting -- poll GET /rollout/task/{id} until status is completed or
failed, then read results and result_paths -- for a task that completes and one cancelled."""

from __future__ import annotations

import time

import httpx

from tests.e2e.conftest import EXAMPLES

POLAR_FINAL = ("completed", "failed")  # the only states Polar's poller stops on


def polar_payload(task_id: str, samples: int, sleep: float = 0.0) -> dict:
    return {
        "task_id": task_id, "instruction": "Create a file named hello.txt containing the line 'hello world'.",
        "num_samples": samples, "timeout_seconds": 240, "early_stop_min_usable_sessions": None,
        "runtime": None,  # Polar: the configured default backend
        "agent": {"custom_shell": {"command": "python \"$POLAR_SESSION_DIR/agent/bash_agent.py\" {{INSTRUCTION}}"
                                              + (f" && sleep {sleep}" if sleep else "")},
                  "model_name": "demo-policy", "env": {}, "settings": {}},
        "builder": {"strategy": "per_request"},
        "evaluator": {"strategy": "command", "config": {"command": "test \"$(cat hello.txt)\" = 'hello world'"}},
        "callback_url": None,
        "metadata": {"group_id": task_id, "policy_version": "3", "rollout_step": "1", "agent_timeout": 200},
    }


def with_upload(payload: dict) -> dict:
    payload["runtime"] = {"backend": "local", "prepare": [
        {"type": "upload_file", "source": str(EXAMPLES / "bash_agent.py"), "target": "/polar/session/agent/bash_agent.py"},
        {"type": "exec", "command": "true", "max_attempts": 2, "retry_backoff_seconds": 0}]}
    return payload


def poll_like_the_bridge(api: httpx.Client, task_id: str, interval: float = 0.3, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = api.get(f"/rollout/task/{task_id}").json()
        if status["status"] in POLAR_FINAL:
            return status
        time.sleep(interval)
    raise AssertionError(f"{task_id} never reached a state Polar's poller stops on")


def api_client(stack) -> httpx.Client:
    return httpx.Client(base_url=stack.settings.api_url, timeout=30,
                        headers={"Authorization": f"Bearer {stack.settings.secret('api_token')}"})


def test_a_polar_payload_completes_and_the_bridges_poll_reads_it(stack, demo_task):
    with api_client(stack) as api:
        task_id = demo_task["task_id"]
        accepted = api.post("/rollout/task/submit", json=with_upload(polar_payload(task_id, 2)))
        assert accepted.status_code == 200 and accepted.json()["task_id"] == task_id, accepted.text
        status = poll_like_the_bridge(api, task_id)
    assert status["status"] == "completed" and status["completed_sessions"] == status["total_sessions"] == 2
    assert len(status["result_paths"]) == 2
    for result in status["results"]:
        assert result["status"] == "COMPLETED" and result["node_id"] and result["trajectory"]["traces"]
        timing = result["timing"]
        assert timing["run_ms"] == timing["durations_ms"]["run"] > 0  # Polar's names, ours beside them
        assert all(timing[k] is not None for k in ("init_ms", "ready_queue_ms", "postrun_ms", "eval_ms", "e2e_ms"))


def test_a_cancelled_task_ends_where_the_bridges_poll_stops(stack, demo_task):
    with api_client(stack) as api:
        task_id = demo_task["task_id"]
        api.post("/rollout/task/submit", json=with_upload(polar_payload(task_id, 2, sleep=60))).raise_for_status()
        deadline = time.monotonic() + 60
        while api.get(f"/rollout/task/{task_id}").json()["counts"].get("RUNNING", 0) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        api.delete(f"/rollout/task/{task_id}").raise_for_status()
        status = poll_like_the_bridge(api, task_id)
    assert status["status"] == "failed" and status["cancelled"] is True
    assert status["completed_sessions"] == 2 and {r["status"] for r in status["results"]} == {"CANCELLED"}
