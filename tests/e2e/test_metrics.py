"""/metrics of the rollout API, scraped while a task runs: the stage queues, stages in flight,
READY and the results stream move as the sessions go through; the route needs the API token."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support import wait_for


def scrape(stack) -> dict[tuple[str, tuple], float]:
    res = httpx.get(f"{stack.settings.api_url}/metrics", timeout=10,
                    headers={"Authorization": f"Bearer {stack.settings.secret('api_token')}"})
    res.raise_for_status()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(res.text) for s in family.samples}


def test_metrics_follow_a_running_task(client, demo_task, stack):
    assert httpx.get(f"{stack.settings.api_url}/metrics", timeout=10).status_code == 401
    before = scrape(stack)
    assert before[("polar_ready_capacity", ())] == stack.settings.ready_capacity
    demo_task["num_samples"] = 6
    demo_task["agent"]["custom_shell"]["command"] += " && sleep 3"
    task_id = client.submit(demo_task)
    seen: dict[str, float] = {"run": 0, "ready": 0}

    def busy() -> bool:
        m = scrape(stack)
        seen["run"] = max(seen["run"], m[("polar_stage_in_flight", (("stage", "run"),))])
        seen["ready"] = max(seen["ready"], m[("polar_ready_depth", ())] + m[("polar_ready_reserved", ())])
        return seen["run"] >= 2 and seen["ready"] >= 1

    wait_for(busy, timeout=120, interval=0.2)
    client.wait(task_id, timeout=240, poll_seconds=0.5)
    after = scrape(stack)
    assert after[("polar_results_stream_length", ())] >= before[("polar_results_stream_length", ())] + 6
    assert after[("polar_stage_in_flight", (("stage", "run"),))] == 0
    assert ("polar_stage_queue_depth", (("stage", "init"),)) in after
    # Every stage ran once per session (done), timed; the sessions are counted by their status.
    for stage in ("init", "run", "postrun", "evaluate", "callback"):
        key = ("polar_stage_runs_total", (("result", "done"), ("stage", stage)))
        assert after[key] - before.get(key, 0) >= 6, stage
        count = ("polar_stage_duration_seconds_count", (("stage", stage),))
        assert after[count] - before.get(count, 0) >= 6, stage
        inf = ("polar_stage_duration_seconds_bucket", (("le", "+Inf"), ("stage", stage)))
        assert after[inf] == after[count]
    run_sum = ("polar_stage_duration_seconds_sum", (("stage", "run"),))
    assert after[run_sum] - before.get(run_sum, 0) >= 6 * 3  # each agent slept 3 s
    done = ("polar_sessions_finished_total", (("status", "COMPLETED"),))
    assert after[done] - before.get(done, 0) == 6
