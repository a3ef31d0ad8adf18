"""The six real CLIs with ``agent.token_in`` (issue 14), under policies that emit turns as a model
does (compact tool-call JSON, a think block: ``as_model_emits``): with it on, no merged turn
drifts, a conversation is one chain and ``polar verify --fail-on-drift`` passes; with it off the
same runs drift. A table per harness (off vs on: drifted turns, chains, spliced calls, trainer
updates and tokens with strict merging) is printed at the end of the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import redis

from pipeline.builders import BuildContext
from pipeline.builders import create as create_builder
from pipeline.status import SessionStatus
from pipeline.stores import Stores
from tests.e2e.test_harness_presets import EXPECTED, ROOT, task_for
from tests.support import report_file

# The modules using presets_stack (six harness CLIs, six run slots) share one process: one stack.
pytestmark = pytest.mark.xdist_group("presets-stack")



@pytest.fixture(scope="module")
def runs(presets_stack, presets_client, engine):
    if engine is None:
        pytest.skip("podman is not installed (qwen_code and pi run in containers)")
    # Twelve sessions for six run slots: a session's budget counts from INIT, which runs ahead of
    # a free slot (the READY buffer), so the second six wait out the first six inside theirs.
    tasks = {(p, mode): presets_client.submit({**task_for(p, runtime, model_name=f"{p}-drift", token_in=mode),
                                               "timeout_seconds": 600})
             for p, (_, runtime, _) in EXPECTED.items() for mode in ("off", "auto")}
    return {k: presets_client.wait(t, timeout=900, poll_seconds=0.5) for k, t in tasks.items()}


def strict_updates(records) -> tuple[int, int]:
    """Trainer updates (traces) and their tokens when drifted turns are split, not merged."""
    eot = next(r.response_ids[-1] for r in records if r.finish_reason in ("stop", "tool_calls"))
    traj = create_builder("prefix_merging", {"end_of_turn_token_id": eot, "strict": True}).build(
        records, BuildContext("s", "t", None, {}))
    return len(traj.traces), sum(len(t.prompt_ids) + len(t.response_ids) for t in traj.traces)


def test_token_in_removes_the_drift_the_same_runs_show_without_it(runs, presets_stack):
    env = {**os.environ, **presets_stack.settings.to_env()}
    stores = Stores.open(redis.Redis.from_url(presets_stack.settings.redis_url), presets_stack.settings)
    report_file("token_in").unlink(missing_ok=True)
    rows = {}
    for (preset, mode), status in runs.items():
        [result] = status.results
        assert result.status == SessionStatus.COMPLETED and result.reward == 1.0, (preset, mode, result.error)
        stats = result.trajectory.metadata["reconstruction"]
        records, _ = stores.records.completions(result.session_id)
        out = subprocess.run([sys.executable, "-m", "infra.cli.main", "verify", "--task", status.task_id, "--model",
                              f"{preset}-drift", "--fail-on-drift", "--json"], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
        updates, tokens = strict_updates(records)
        spliced = sum(bool(r.token_in and r.token_in.get("spliced")) for r in records)
        rows[(preset, mode)] = row = {
            "harness": preset, "token_in": mode, "completions": len(records), "chains": stats["chains_total"],
            "drifted_turns": stats["drifted_turns"], "spliced_calls": spliced,
            "strict_updates": updates, "strict_tokens": tokens, "verify_fail_on_drift": out.returncode == 0}
        with report_file("token_in").open("a") as f:
            f.write(json.dumps(row) + "\n")
    for preset, (_, _, chains) in EXPECTED.items():
        on, off = rows[(preset, "auto")], rows[(preset, "off")]
        assert on["drifted_turns"] == 0 and on["chains"] == chains and on["verify_fail_on_drift"], on
        # every call of the main conversation after its first continues a recorded turn
        assert on["spliced_calls"] >= on["completions"] - chains, on
        assert off["drifted_turns"] > 0 and not off["verify_fail_on_drift"] and off["spliced_calls"] == 0, off
        assert on["strict_updates"] == chains and off["strict_updates"] > chains, (on, off)


def test_opencodes_rewritten_call_to_an_unknown_tool_starts_a_chain_not_a_drift(presets_stack, presets_client):
    """opencode sends a call to a tool it does not have back as a call to ``invalid`` (arguments:
    the tool and the error). That turn cannot be spliced (the history was edited), and it merged
    as a drift that ran to the session's end: 6 of 8 turns drifted with token-in on, and
    ``verify --fail-on-drift`` failed. The rewritten turn starts a chain of its own: with token-in
    on, no turn drifts, and the call the harness rejected keeps its own exact trace."""
    task = task_for("opencode", "local", model_name="opencode_unknown_tool-drift", token_in="auto")
    status = presets_client.wait(presets_client.submit({**task, "timeout_seconds": 600}), timeout=600, poll_seconds=0.5)
    [result] = status.results
    assert result.status == SessionStatus.COMPLETED and result.reward == 1.0, (result.error, result.metadata)
    stores = Stores.open(redis.Redis.from_url(presets_stack.settings.redis_url), presets_stack.settings)
    records, _ = stores.records.completions(result.session_id)
    rejected = [r for r in records if any((c.get("function") or {}).get("name") == "frobnicate"
                                         for c in r.response_message.get("tool_calls") or [])]
    assert len(rejected) == 1, [r.response_message for r in records]
    echoed = [m for r in records for m in r.normalized_request.get("messages") or []
              if m.get("role") == "assistant" and any((c.get("function") or {}).get("name") == "invalid"
                                                      for c in m.get("tool_calls") or [])]
    assert echoed, "opencode no longer rewrites a call to an unknown tool: this test shows nothing"
    stats = result.trajectory.metadata["reconstruction"]
    # the title call, the rejected call, the conversation after it
    assert (stats.get("rewrite_splits"), stats["drifted_turns"], stats["chains_total"]) == (1, 0, 3), stats
    [alone] = [t for t in result.trajectory.traces if t.metadata["completion_ids"] == [rejected[0].completion_id]]
    assert alone.metadata["context_exact"] and alone.response_ids == rejected[0].response_ids
    env = {**os.environ, **presets_stack.settings.to_env()}
    out = subprocess.run([sys.executable, "-m", "infra.cli.main", "verify", "--task", status.task_id, "--model",
                          "opencode_unknown_tool-drift", "--fail-on-drift", "--json"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-2000:])
