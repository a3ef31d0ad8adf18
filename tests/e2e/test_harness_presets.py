"""The six real agent CLIs, unmodified, as one-line presets through the whole pipeline: each
reads a file, writes one, runs a command and finishes under its own scripted policy (its own
tool vocabulary, tests/fixtures/harness_policies/), over its own provider API, in the local
runtime or in a podman container with the CLIs mounted from the host's tools folder.

The CLIs come from ``polar harnesses install`` into POLAR_TEST_TOOLS_DIR (``.ci/run`` installs
them; default ~/.cache/polar-test-tools). Where they are missing the tests skip -- unless
POLAR_TEST_REQUIRE_RUNTIMES is set (CI), where that is a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis

from infra.harness_tools import HARNESS_CLIS, installed_versions
from pipeline.status import SessionStatus
from pipeline.stores import Stores
from tests.conftest import TEST_IMAGE
from tests.e2e.conftest import TOOLS
from tests.support import report_file

# The modules using presets_stack (six harness CLIs, six run slots) share one process: one stack.
pytestmark = pytest.mark.xdist_group("presets-stack")

ROOT = Path(__file__).resolve().parents[2]
INSTRUCTION = "Read input.txt, then write hello.txt containing its text followed by ' world', then show hello.txt."

# preset -> (provider API its CLI speaks, runtime, chains prefix_merging should give and why)
EXPECTED = {
    "codex": ("openai_responses", "local", 1),
    "claude_code": ("anthropic", "local", 1),
    "gemini_cli": ("google", "local", 1),
    # qwen's file tools take absolute paths only: its policy names /polar/session/workspace/...,
    # the same path in every container.
    "qwen_code": ("openai_chat", "docker", 1),
    # opencode asks for a title first: a separate conversation with no tools, so its own chain.
    "opencode": ("openai_chat", "local", 2),
    "pi": ("openai_chat", "docker", 1),
}


def task_for(preset: str, runtime: str, **agent) -> dict:
    rt: dict = {"prepare": [{"type": "exec", "command": "echo hello > input.txt"}]}
    if runtime == "docker":
        rt.update(backend="docker", image=TEST_IMAGE)
    return {"task_id": f"preset-{preset}-{uuid.uuid4().hex[:6]}", "instruction": INSTRUCTION, "num_samples": 1,
            "timeout_seconds": 240, "runtime": rt,
            "agent": {"harness": preset, "model_name": preset, **agent},
            "builder": {"strategy": "prefix_merging"},
            "evaluator": {"strategy": "command", "config": {"command": "test \"$(cat hello.txt)\" = 'hello world'"}}}


@pytest.fixture(scope="module")
def results(presets_stack, presets_client, engine):
    """All six submitted at once (they run side by side, as a training step would run them)."""
    if engine is None:
        pytest.skip("podman is not installed (qwen_code and pi run in containers)")
    tasks = {p: presets_client.submit(task_for(p, runtime)) for p, (_, runtime, _) in EXPECTED.items()}
    return {p: presets_client.wait(t, timeout=600, poll_seconds=0.5) for p, t in tasks.items()}


@pytest.mark.parametrize("preset", list(EXPECTED))
def test_each_cli_does_the_task_through_its_own_api(preset, results, presets_stack):
    provider, runtime, chains = EXPECTED[preset]
    status = results[preset]
    [result] = status.results
    assert result.status == SessionStatus.COMPLETED and result.reward == 1.0, (result.error, result.metadata)
    stores = Stores.open(redis.Redis.from_url(presets_stack.settings.redis_url), presets_stack.settings)
    records, _ = stores.records.completions(result.session_id)
    assert len(records) >= 3 and {r.provider for r in records} == {provider}
    assert all(r.stream for r in records)  # all six stream
    assert not stores.records.errors(result.session_id)
    if preset in ("claude_code", "opencode"):  # they ask for 32,000 output tokens: more than fits
        assert all(r.requested_max_tokens == 32_000 and r.sent_max_tokens < 32_000 for r in records), \
            [(r.requested_max_tokens, r.sent_max_tokens) for r in records]
    stats = result.trajectory.metadata["reconstruction"]
    assert stats["chains_total"] == chains, stats
    main = max(result.trajectory.traces, key=lambda t: len(t.metadata["turns"]))
    assert len(main.metadata["turns"]) >= 3  # the whole episode is one conversation
    kept = Path(result.metadata["artifacts_dir"])
    assert (kept / "logs" / "agent.stdout").exists()  # what the CLI printed outlives the runtime


def test_the_trajectories_verify_against_the_model(results, presets_stack):
    """`polar verify` re-scores every trainable token; the report table (harness x version x API x
    completions x chains x drifted turns x verified) is printed at the end of the run."""
    env = {**os.environ, **presets_stack.settings.to_env()}
    report_file("harness").unlink(missing_ok=True)
    versions = installed_versions(TOOLS)
    stores = Stores.open(redis.Redis.from_url(presets_stack.settings.redis_url), presets_stack.settings)
    for preset, status in results.items():
        out = subprocess.run([sys.executable, "-m", "infra.cli.main", "verify", "--task", status.task_id,
                              "--model", preset, "--json"], env=env, cwd=ROOT, capture_output=True, text=True,
                             timeout=300)
        verified = out.returncode == 0 and all(rep["ok"] for rep in json.loads(out.stdout))
        [result] = status.results
        stats = result.trajectory.metadata.get("reconstruction", {})
        records, _ = stores.records.completions(result.session_id)
        with report_file("harness").open("a") as f:
            f.write(json.dumps({
                "harness": preset, "version": versions[preset], "provider_api": EXPECTED[preset][0],
                "streamed": all(r.stream for r in records), "runtime": EXPECTED[preset][1], "completions": stats.get("completions_total"),
                "chains": stats.get("chains_total"), "drifted_turns": stats.get("drifted_turns"),
                "verified": verified, "agent_s": round((result.timing.durations_ms.get("run") or 0) / 1000, 1)}) + "\n")
        assert verified, (preset, out.stdout[-2000:], out.stderr[-2000:])


def test_a_cli_whose_calls_all_fail_ends_error_naming_the_proxys_error(presets_client):
    """pi asks for a model the engine does not serve: every call fails; the session is ERROR and
    its error carries the engine's answer as the proxy relayed it."""
    task = task_for("pi", "local", model_name="no-such-policy")
    status = presets_client.wait(presets_client.submit(task), timeout=300, poll_seconds=0.5)
    [result] = status.results
    assert result.status == SessionStatus.ERROR
    assert "last model-API error" in result.error and "no-such-policy" in result.error, result.error
    assert result.trajectory.metadata["proxy_errors"], result.trajectory.metadata


def test_an_agent_that_makes_no_model_call_ends_error(presets_client):
    task = task_for("pi", "local")
    task["agent"] = {"custom_shell": "echo 'I did nothing'"}  # exits 0, never calls the model
    [result] = presets_client.wait(presets_client.submit(task), timeout=120, poll_seconds=0.3).results
    assert result.status == SessionStatus.ERROR and "no completions captured" in result.error, result.error


def test_doctor_runs_each_cli_and_one_real_session_per_cli(presets_stack, tools):
    env = {**os.environ, **presets_stack.settings.to_env(), "POLAR_TOOLS_DIR": str(tools)}
    out = subprocess.run([sys.executable, "-m", "infra.cli.main", "harnesses", "doctor", "--timeout", "240", "--json"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    versions = {c["harness"]: c["detail"] for c in report["clis"] if c["ok"]}
    for name, (_, version, _) in HARNESS_CLIS.items():
        assert version in versions.get(name, ""), report
    assert sorted(s["harness"] for s in report["smoke"] if s["ok"]) == sorted(HARNESS_CLIS), report
    assert report["problems"] == 0


def test_an_mcp_server_from_the_task_is_started_and_called_by_the_cli(presets_client, presets_stack):
    """agent.settings.mcp_servers: claude_code starts the stdio server the task names and calls
    its tool; the tool's answer is in the CLI's next model call."""
    task = task_for("claude_code", "local", model_name="claude_code_mcp", settings={"mcp_servers": [
        {"name": "stamp", "command": sys.executable, "args": [str(ROOT / "tests" / "fixtures" / "mcp_stamp_server.py")]}]})
    task["evaluator"] = {"strategy": "session_completed"}
    [result] = presets_client.wait(presets_client.submit(task), timeout=300, poll_seconds=0.5).results
    assert result.status == SessionStatus.COMPLETED, result.error
    stores = Stores.open(redis.Redis.from_url(presets_stack.settings.redis_url), presets_stack.settings)
    records, _ = stores.records.completions(result.session_id)
    later = json.dumps([r.original_request.get("messages") for r in records[1:]])
    assert "stamped:from-the-policy" in later, later[-3000:]


def first_call_tells_the_skill(task: dict, presets_client, presets_stack) -> None:
    """Run ``task`` (a smoke session): it completes, and its CLI's first model call carries the
    fixture skill's description (the CLI found the skill)."""
    task["agent"]["model_name"] = "polar-smoke"
    task["evaluator"] = {"strategy": "session_completed"}
    [result] = presets_client.wait(presets_client.submit(task), timeout=300, poll_seconds=0.5).results
    assert result.status == SessionStatus.COMPLETED, result.error
    stores = Stores.open(redis.Redis.from_url(presets_stack.settings.redis_url), presets_stack.settings)
    records, _ = stores.records.completions(result.session_id)
    assert "polar-rollout house style" in json.dumps(records[0].original_request)


@pytest.mark.parametrize("preset", ["claude_code", "codex"])
def test_a_skills_folder_from_the_task_reaches_the_cli(preset, presets_client, presets_stack):
    """agent.settings.skills_dir: the CLI finds the task's skills where it looks for its own and
    tells the model about them (the skill's description is in its first model call)."""
    task = task_for(preset, "local", settings={"skills_dir": str(ROOT / "tests" / "fixtures" / "skills")})
    first_call_tells_the_skill(task, presets_client, presets_stack)
    skills = ROOT / "tests" / "fixtures" / "skills"
    assert sorted(p.name for p in skills.iterdir()) == ["polar-greeting"]  # the CLI wrote nothing into it
