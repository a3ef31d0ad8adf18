"""/metrics of the rollout API and of the proxy, scraped while a task runs: the stage queues,
stages in flight, READY and the results stream move as the sessions go through, and the proxy
counts the agents' model calls, tokens and records; both routes need their token."""

from __future__ import annotations

import httpx

from tests.support import metric_samples, wait_for


def scrape(stack) -> dict[tuple[str, tuple], float]:
    res = httpx.get(f"{stack.settings.api_url}/metrics", timeout=10,
                    headers={"Authorization": f"Bearer {stack.settings.secret('api_token')}"})
    res.raise_for_status()
    return metric_samples(res.text)


def scrape_proxy(stack) -> dict[tuple[str, tuple], float]:
    res = httpx.get(f"{stack.settings.proxy_url}/metrics", timeout=10,
                    headers={"x-polar-admin-token": stack.settings.secret("admin_token") or ""})
    res.raise_for_status()
    return metric_samples(res.text)


def total(m: dict, name: str, **labels) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    return sum(v for (n, ls), v in m.items() if n == name and set(labels.items()) <= set(ls))


def test_metrics_follow_a_running_task(client, demo_task, stack):
    assert httpx.get(f"{stack.settings.api_url}/metrics", timeout=10).status_code == 401
    assert httpx.get(f"{stack.settings.proxy_url}/metrics", timeout=10).status_code == 401
    before = scrape(stack)
    proxy_before = scrape_proxy(stack)
    assert before[("polar_ready_capacity", ())] == stack.settings.ready_capacity
    demo_task["num_samples"] = 6
    demo_task["agent"]["custom_shell"]["command"] += " && sleep 3"
    task_id = client.submit(demo_task)
    seen: dict[str, float] = {"run": 0, "ready": 0}

    def busy() -> bool:
        m = scrape(stack)
        seen["run"] = max(seen["run"], m[("polar_stage_in_flight", (("stage", "run"),))])
        seen["ready"] = max(seen["ready"], m[("polar_ready_depth", ())] + m[("polar_ready_reserved", ())])
        scrape_proxy(stack)  # the proxy answers its scrape while the agents call it
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

    # Every session's agent called the model through the proxy (openai SDK, streamed): whichever
    # proxy worker answers the scrape reports the calls of all of them, one record per answer.
    def delta(m: dict, name: str, **labels) -> float:
        return total(m, name, **labels) - total(proxy_before, name, **labels)

    def proxy_counted() -> dict | None:
        m = scrape_proxy(stack)
        calls = delta(m, "polar_proxy_calls_total", provider="openai_chat", status="200")
        return m if calls >= 6 and calls == delta(m, "polar_proxy_records_written_total", kind="completion") else None

    proxy_after = wait_for(proxy_counted, timeout=20, interval=0.5)
    calls = delta(proxy_after, "polar_proxy_calls_total", provider="openai_chat", status="200")
    for name in ("polar_proxy_prompt_tokens_total", "polar_proxy_completion_tokens_total"):
        assert delta(proxy_after, name, provider="openai_chat") >= calls  # at least a token each way per call
    assert delta(proxy_after, "polar_proxy_upstream_latency_seconds_count") == calls
    assert proxy_after[("polar_proxy_calls_in_flight", ())] == 0 and proxy_after[("polar_proxy_paused", ())] == 0
