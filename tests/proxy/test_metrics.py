"""/metrics of the real proxy (gunicorn, 2 gevent workers, multiprocess prometheus-client): calls
through the official openai and anthropic SDKs, served by several worker processes (one of them
restarted in between), are all in one scrape, with token counters equal to what the records hold.

The kernel tends to hand every new connection to the same idle worker, so the test stops the
worker that served the first calls (gunicorn starts another): its counts must survive it."""

from __future__ import annotations

import glob
import os
import signal
import tempfile
from pathlib import Path

import anthropic
import httpx
import openai
from prometheus_client import multiprocess

from tests.support import MSG, metric_samples, records, running_session, wait_for

BATCH = 8  # calls per batch, half through each SDK, each on its own connection


def scrape(stack, **headers) -> httpx.Response:
    return httpx.get(f"{stack.settings.proxy_url}/metrics", headers=headers, timeout=10)


def workers_of(master: int) -> set[int]:
    return {int(c) for task in Path(f"/proc/{master}/task").iterdir() for c in (task / "children").read_text().split()}


def calls_per_process(folder: str) -> dict[int, float]:
    """Model calls counted in each worker's own file (named by the worker's pid)."""
    out = {}
    for path in glob.glob(os.path.join(folder, "counter_*.db")):
        for metric in multiprocess.MultiProcessCollector.merge([path]):
            if metric.name == "polar_proxy_calls":
                out[int(path.rsplit("_", 1)[1][:-3])] = sum(s.value for s in metric.samples if s.name.endswith("_total"))
    return out


def make_calls(stack, key: str) -> None:
    base = f"{stack.settings.proxy_url}/s/{key}"
    for i in range(BATCH // 2):  # a new client each time: a new connection, accepted by any worker
        openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0).chat.completions.create(
            model="fake", messages=MSG, stream=i % 2 == 1)
        anthropic.Anthropic(base_url=base, api_key=key, max_retries=0).messages.create(
            model="fake", max_tokens=5, messages=MSG)


def test_one_scrape_sums_every_worker_process(fake_stack):
    token = fake_stack.settings.secret("admin_token")
    assert scrape(fake_stack).status_code == 401
    assert scrape(fake_stack, **{"x-polar-admin-token": "nope"}).status_code == 401
    master = fake_stack.pid("proxy")
    folder, = glob.glob(os.path.join(tempfile.gettempdir(), f"polar-proxy-metrics-{master}-*"))
    wait_for(lambda: len(workers_of(master)) == 2, timeout=30)  # gunicorn starts them one after another

    def counted(at_least: float, per_provider: int = 0):
        def check():
            res = scrape(fake_stack, Authorization=f"Bearer {token}")  # as Prometheus sends it
            assert res.status_code == 200
            m = metric_samples(res.text)
            total = sum(v for (name, _), v in m.items() if name == "polar_proxy_calls_total")
            # Each worker flushes its tallies on its own clock: the total can reach its mark on
            # another test's late tallies before this test's last call of one provider lands.
            mine = all(m.get(("polar_proxy_calls_total", (("provider", p), ("status", "200"))), 0) >= per_provider
                       for p in ("openai_chat", "anthropic"))
            return m if total >= at_least and mine else None
        return check

    before = sum(calls_per_process(folder).values())  # other tests may share this stack's proxy
    key = running_session(fake_stack.settings.redis_url)
    make_calls(fake_stack, key)
    wait_for(counted(before + BATCH), timeout=20, interval=0.3)  # a worker's tallies land within a second
    first = {pid for pid, n in calls_per_process(folder).items() if n > 0} & workers_of(master)
    for pid in first:
        os.kill(pid, signal.SIGTERM)  # graceful: gunicorn replaces it
    wait_for(lambda: len(workers_of(master)) == 2 and not workers_of(master) & first, timeout=30)
    assert not any(glob.glob(os.path.join(folder, f"gauge_livesum_{pid}.db")) for pid in first)  # child_exit

    make_calls(fake_stack, key)
    m = wait_for(counted(before + 2 * BATCH, per_provider=BATCH), timeout=20, interval=0.3)
    per_process = calls_per_process(folder)
    assert len([n for n in per_process.values() if n > 0]) >= 2, per_process  # stopped worker + a live one
    assert sum(per_process.values()) == sum(v for (name, _), v in m.items() if name == "polar_proxy_calls_total")
    done, errors = records(fake_stack.settings.redis_url, key)
    assert len(done) == 2 * BATCH and not errors
    for provider in ("openai_chat", "anthropic"):
        assert m[("polar_proxy_calls_total", (("provider", provider), ("status", "200")))] >= BATCH
        mine = [r for r in done if r["provider"] == provider]
        assert len(mine) == BATCH
        assert m[("polar_proxy_prompt_tokens_total", (("provider", provider),))] >= sum(len(r["prompt_ids"]) for r in mine)
        assert m[("polar_proxy_completion_tokens_total", (("provider", provider),))] >= sum(
            len(r["response_ids"]) for r in mine)
    assert m[("polar_proxy_calls_in_flight", ())] == 0 and m[("polar_proxy_paused", ())] == 0
