"""The chaos suite: faults injected into a running, supervised stack (persistent embedded Redis,
the reference model, proxy, API, a worker per stage, Flower), as `polar up` runs it. Each
scenario submits a task, injects one fault mid-task, and checks that every session ends, each
exactly once on the results stream, with nothing left behind; it appends a row to the report
that tests/conftest.py prints at the end (fault x submitted x completed x errored x duplicates x
leaked runtimes x time to recover)."""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest
import redis

from infra.embedded_redis import free_port
from infra.stack import Stack, StackConfig
from pipeline import keys
from pipeline.client import RolloutClient, load_task_file
from pipeline.settings import Settings
from pipeline.status import SessionStatus, Stage
from tests.support import report_file, wait_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES, FIXTURES = ROOT / "examples", ROOT / "tests" / "fixtures"


@pytest.fixture(scope="session")
def chaos_stack(tmp_path_factory, model_dir, engine):
    settings = Settings(home=tmp_path_factory.mktemp("chaos-home"), stage_lease_seconds=4, reaper_interval_seconds=1,
                        call_lease_seconds=3, callback_attempts=6, ready_capacity=4, docker_host=engine)
    config = StackConfig(settings=settings, model_dir=model_dir, persist_redis=True, flower_port=free_port(),
                         concurrency={Stage.RUN: 4},
                         policies={"demo-policy": str(EXAMPLES / "demo_policy.json"),
                                   "slow-model": str(FIXTURES / "slow_model_policy.json")})
    with Stack(config) as stack:
        yield stack


@pytest.fixture(scope="session")
def chaos_client(chaos_stack):
    return RolloutClient.from_settings(chaos_stack.settings)


def task(samples: int = 4, policy: str = "demo-policy", prepare_sleep: float = 0.0, evaluate_sleep: float = 0.0,
         **extra) -> dict:
    t = load_task_file(EXAMPLES / "demo_task.json")
    t = copy.deepcopy(t)
    t.update(task_id=f"chaos-{uuid.uuid4().hex[:8]}", num_samples=samples, timeout_seconds=120, **extra)
    t["agent"]["model_name"] = policy
    if prepare_sleep:
        t["runtime"]["prepare"].append({"type": "exec", "command": f"sleep {prepare_sleep}"})
    if evaluate_sleep:
        t["evaluator"]["config"]["command"] = f"sleep {evaluate_sleep}; " + t["evaluator"]["config"]["command"]
    return t


def stream_counts(stack: Stack, task_id: str) -> Counter:
    r = redis.Redis.from_url(stack.settings.redis_url)
    return Counter(f[b"session_id"].decode() for _, f in r.xrange(keys.RESULTS_STREAM)
                   if f.get(b"task_id", b"").decode() == task_id)


def tagged_processes(root: Path) -> list[int]:
    tag = f"POLAR_SESSION_DIR={root}".encode()
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if tag in (proc / "environ").read_bytes().split(b"\0"):
                    out.append(int(proc.name))
            except OSError:
                pass
    return out


def containers_of(stack: Stack, session_ids: list[str]) -> list[str]:
    """The containers (agent's and evaluation runtimes) the sessions' runtimes made, still there."""
    if not stack.settings.docker_host:
        return []
    from workers.runtimes import docker

    wanted = set(session_ids)
    return [name for name, sid, _ in docker.session_containers(stack.settings.docker_host, stack.settings.runtime_root)
            if sid in wanted]


def leaked(stack: Stack, session_ids: list[str]) -> int:
    """Runtime directories (and processes started in them) and containers that outlived their session."""
    roots = [stack.settings.runtime_root / sid for sid in session_ids]
    return (sum(1 for r in roots if r.exists()) + sum(len(tagged_processes(r.resolve())) for r in roots)
            + len(containers_of(stack, session_ids)))


def finish_and_report(stack: Stack, client: RolloutClient, fault: str, task_id: str, faulted_at: float,
                      mid_stage: bool, recovered: float | None = None, timeout: float = 240,
                      callback: bool = False) -> dict:
    """Wait for the task to end; check and report what the fault did."""
    status = client.wait(task_id, timeout=timeout, poll_seconds=0.3)
    ended = time.monotonic()
    counts = stream_counts(stack, task_id)
    sids = [s.session_id for s in status.sessions]
    wait_for(lambda: leaked(stack, sids) == 0, timeout=30)  # teardown finishes just after the status
    by_status = Counter(r.status for r in status.results)
    row = {
        "fault": fault, "mid_stage": mid_stage, "submitted": status.total_sessions,
        "completed": by_status[SessionStatus.COMPLETED], "errored": by_status[SessionStatus.ERROR]
        + by_status[SessionStatus.TIMEOUT], "duplicates": sum(counts.values()) - len(counts),
        "on_stream": len(counts), "leaked_runtimes": leaked(stack, sids),
        "component_back_s": None if recovered is None else round(recovered - faulted_at, 1),
        "task_done_after_fault_s": round(ended - faulted_at, 1),
    }
    if callback:  # when the task's callback was acknowledged, after the fault
        wait_for(lambda: (c := client.status(task_id, results=False).callback) and c["state"] == "delivered",
                 timeout=180, interval=0.2)
        row["callback_delivered_after_fault_s"] = round(time.monotonic() - faulted_at, 1)
    with report_file("chaos").open("a") as f:
        f.write(json.dumps(row) + "\n")
    assert row["on_stream"] == row["submitted"] == len(status.results), row  # every session, once
    assert row["duplicates"] == 0 and row["leaked_runtimes"] == 0, row
    assert row["completed"] + row["errored"] == row["submitted"], row
    return row


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
