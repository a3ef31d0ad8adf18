"""The full stack, started once for the end-to-end tests exactly as `polar up` starts it:
embedded Redis, the reference model server (scripted policies), proxy, API, five workers and
Flower, all real processes."""

from __future__ import annotations

import copy
import json
import os
import uuid
from pathlib import Path

import pytest

from infra.embedded_redis import free_port
from infra.stack import Stack, StackConfig
from pipeline.client import RolloutClient, load_task_file
from pipeline.settings import Settings
from pipeline.status import Stage
from tests.support import wait_for  # noqa: F401 (re-exported for the e2e tests)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures"
RUN_SLOTS = 4


@pytest.fixture(scope="session")
def stack(tmp_path_factory, model_dir, engine):
    home = tmp_path_factory.mktemp("polar-home")
    # Few run slots and a small READY buffer, so that backpressure is observable.
    # A short head deadline, so that test_faults' slow clients are answered quickly.
    settings = Settings(home=home, ready_capacity=RUN_SLOTS // 2, stage_lease_seconds=6,
                        reaper_interval_seconds=2, docker_host=engine, http_head_seconds=3)
    config = StackConfig(
        settings=settings, model_dir=model_dir, concurrency={Stage.RUN: RUN_SLOTS},
        policies={"demo-policy": str(EXAMPLES / "demo_policy.json"),
                  "sleepy-policy": str(FIXTURES / "sleepy_policy.json"),
                  "viewer-policy": str(FIXTURES / "viewer_policy.json"),
                  "drain-policy": str(FIXTURES / "drain_policy.json")},
        flower_port=free_port(),
    )
    with Stack(config) as running:
        yield running


@pytest.fixture(scope="session")
def client(stack):
    return RolloutClient.from_settings(stack.settings)


@pytest.fixture
def demo_task():
    task = load_task_file(EXAMPLES / "demo_task.json")
    task["task_id"] = f"t-{uuid.uuid4().hex[:10]}"
    return copy.deepcopy(task)


def sleepy_task(timeout_seconds: float, samples: int = 1, policy: str = "sleepy-policy") -> dict:
    task = load_task_file(EXAMPLES / "demo_task.json")
    task.update(task_id=f"sleepy-{uuid.uuid4().hex[:8]}", num_samples=samples, timeout_seconds=timeout_seconds)
    task["agent"]["model_name"] = policy
    task["evaluator"] = {"strategy": "session_completed"}
    return task


# --- the harness CLIs (tests/e2e/test_harness_presets.py, test_generate.py) -------------------

HARNESS_POLICIES = ROOT / "tests" / "fixtures" / "harness_policies"
TOOLS = Path(os.environ.get("POLAR_TEST_TOOLS_DIR") or Path.home() / ".cache" / "polar-test-tools")


@pytest.fixture(scope="session")
def tools():
    """The six CLIs at their pinned versions, from ``polar harnesses install`` (``.ci/run``)."""
    from infra.harness_tools import HARNESS_CLIS, installed_versions

    have = installed_versions(TOOLS)
    missing = [n for n, (_, version, _) in HARNESS_CLIS.items() if have[n] != version]
    if missing:
        message = f"harness CLIs {missing} not in {TOOLS} (polar harnesses install, POLAR_TOOLS_DIR={TOOLS})"
        if os.environ.get("POLAR_TEST_REQUIRE_RUNTIMES"):
            pytest.fail(message)
        pytest.skip(message)
    return TOOLS


def as_model_emits(script: dict) -> dict:
    """A scripted policy's turns as a model emits them rather than as the template renders them:
    tool-call JSON compact (no spaces), a think block before the first turn. Re-rendering such a
    history gives other ids (the template re-serialises the arguments; a harness may drop the
    reasoning): the drift ``agent.token_in`` removes."""
    turns = []
    for i, turn in enumerate(script["turns"]):
        if not turn.get("tool_calls"):
            turns.append(turn)
            continue
        text = "<think>\nLook at the files first.\n</think>\n\n" if i == 0 else ""
        text += turn.get("content") or ""
        for j, call in enumerate(turn["tool_calls"]):
            body = json.dumps({"name": call["name"], "arguments": call["arguments"]}, separators=(",", ":"))
            text += ("\n" if (turn.get("content") or j) else "") + f"<tool_call>\n{body}\n</tool_call>"
        turns.append({"text": text})
    return {"turns": turns}


@pytest.fixture(scope="session")
def presets_stack(tmp_path_factory, model_dir, engine, tools):
    """A stack whose workers find the CLIs in the tools folder, with one scripted policy per
    harness (named as its file)."""
    settings = Settings(home=tmp_path_factory.mktemp("presets-home"), tools_dir=tools, docker_host=engine,
                        ready_capacity=6)
    policies = {p.stem: str(p) for p in HARNESS_POLICIES.glob("*.json")}
    drift = tmp_path_factory.mktemp("drift-policies")
    for p in HARNESS_POLICIES.glob("*.json"):  # "<harness>-drift": the same turns, emitted as a model does
        out = drift / f"{p.stem}-drift.json"
        out.write_text(json.dumps(as_model_emits(json.loads(p.read_text()))))
        policies[out.stem] = str(out)
    with Stack(StackConfig(settings=settings, model_dir=model_dir, policies=policies,
                           concurrency={Stage.RUN: 6})) as stack:
        yield stack


@pytest.fixture(scope="session")
def presets_client(presets_stack):
    return RolloutClient.from_settings(presets_stack.settings)
