"""A fault under a real harness CLI, not a scripted curl agent: the CLI has retry and timeout
behaviour of its own, and the service must still end the session correctly. Redis is killed
(-9) while codex's model call is in flight (the engine holds the answer back): the proxy keeps
the answer until it can write the record to the Redis that comes back from its append-only file,
and the session completes with every sampled turn recorded once, token-faithful, on the results
stream once. Its own stack (the CLIs' tools folder, a persistent Redis); skipped where codex is
not installed (``polar harnesses install``), unless POLAR_TEST_REQUIRE_RUNTIMES is set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest
import redis

from infra.harness_tools import HARNESS_CLIS, installed_versions
from infra.stack import Stack, StackConfig
from pipeline.client import RolloutClient
from pipeline.settings import Settings
from pipeline.status import SessionStatus, Stage
from pipeline.stores import Stores
from tests.chaos.conftest import ROOT, finish_and_report, healthy
from tests.e2e.conftest import HARNESS_POLICIES, TOOLS
from tests.e2e.test_harness_presets import task_for
from tests.support import wait_for

CLI = "codex"
POLICY = f"{CLI}-slow-call"


@pytest.fixture(scope="module")
def harness_stack(tmp_path_factory, model_dir):
    if installed_versions(TOOLS)[CLI] != HARNESS_CLIS[CLI][1]:
        message = f"{CLI} {HARNESS_CLIS[CLI][1]} not in {TOOLS} (polar harnesses install)"
        if os.environ.get("POLAR_TEST_REQUIRE_RUNTIMES"):
            pytest.fail(message)
        pytest.skip(message)
    # codex's own policy, its second call held back by the engine: the window the fault lands in
    script = json.loads((HARNESS_POLICIES / f"{CLI}.json").read_text())
    script["turns"][1]["delay_seconds"] = 6
    policy = tmp_path_factory.mktemp("policies") / f"{POLICY}.json"
    policy.write_text(json.dumps(script))
    settings = Settings(home=tmp_path_factory.mktemp("harness-chaos-home"), tools_dir=TOOLS, stage_lease_seconds=6,
                        reaper_interval_seconds=1, call_lease_seconds=3)
    config = StackConfig(settings=settings, model_dir=model_dir, persist_redis=True, policies={POLICY: str(policy)},
                         concurrency={Stage.RUN: 1})
    with Stack(config) as stack:
        yield stack


def test_redis_killed_while_a_real_clis_call_is_in_flight(harness_stack):
    stack, client = harness_stack, RolloutClient.from_settings(harness_stack.settings)
    admin = httpx.Client(base_url=stack.settings.proxy_url, timeout=30,
                         headers={"x-polar-admin-token": stack.settings.secret("admin_token") or ""})

    def stores() -> Stores:
        return Stores.open(redis.Redis.from_url(stack.settings.redis_url), stack.settings)

    task_id = client.submit(task_for(CLI, "local", model_name=POLICY))
    sid = wait_for(lambda: next((s.session_id for s in client.status(task_id, results=False).sessions), None),
                   timeout=60)
    def call_in_flight() -> str | None:
        """The first turn recorded and the second admitted, held by the engine: "held". "missed": a
        machine so slow that the held call was over before we looked (the fault then lands later)."""
        recorded = len(stores().records.completions(sid)[0])
        if recorded and admin.get("/admin/status").json()["inflight"] >= 1:
            return "held"
        return "missed" if recorded >= 2 else None

    mid = wait_for(call_in_flight, timeout=180, interval=0.05) == "held"
    old = stack.pid("redis")
    faulted = time.monotonic()
    stack.kill("redis")
    wait_for(lambda: stack.pid("redis") not in (None, old) and healthy(stack.settings.proxy_url), timeout=60)
    row = finish_and_report(stack, client, f"kill -9 redis ({CLI} call in flight)", task_id, faulted, mid,
                            time.monotonic())  # (on the stream once, nothing leaked)

    [result] = client.status(task_id).results
    assert result.status == SessionStatus.COMPLETED and result.reward == 1.0, (result.error, row)
    records, _ = stores().records.completions(sid)
    # each of the four scripted turns recorded exactly once (none lost with Redis, none twice)
    assert len(records) == result.trajectory.metadata["reconstruction"]["completions_total"] == 4, \
        [(r.seq, len(r.response_ids)) for r in records]
    for record in records:  # every sampled token is in the trajectory, trainable
        assert any(_trainable_run(trace, record.response_ids) for trace in result.trajectory.traces), record.seq
    out = subprocess.run([sys.executable, "-m", "infra.cli.main", "verify", "--task", task_id, "--model", POLICY,
                          "--json"], env={**os.environ, **stack.settings.to_env()}, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and all(rep["ok"] for rep in json.loads(out.stdout)), out.stdout[-2000:] + out.stderr


def _trainable_run(trace, ids: list[int]) -> bool:
    """``ids`` appear in the trace's response, every one of them with loss mask 1."""
    n = len(ids)
    return any(trace.response_ids[i:i + n] == ids and all(m == 1.0 for m in trace.loss_mask[i:i + n])
               for i in range(len(trace.response_ids) - n + 1))
