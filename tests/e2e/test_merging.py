"""prefix_merging through the whole pipeline, checked by `polar verify` against the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pipeline.status import SessionStatus

ROOT = Path(__file__).resolve().parents[2]


def run(client, task):
    task_id = client.submit(task)
    return task_id, client.wait(task_id, timeout=180, poll_seconds=0.3)


def test_merged_sessions_verify_and_need_fewer_trainer_updates(client, demo_task, stack):
    demo_task.update(num_samples=2)
    demo_task["agent"]["env"]["POLAR_AGENT_STREAM"] = "0"
    per_request = dict(demo_task, task_id=demo_task["task_id"] + "-pr")
    _, pr_status = run(client, per_request)
    demo_task["builder"] = {"strategy": "prefix_merging"}
    task_id, status = run(client, demo_task)

    assert {r.status for r in status.results} == {SessionStatus.COMPLETED}
    for result in status.results:
        [trace] = result.trajectory.traces  # three model calls, one conversation, one trace
        turns = trace.metadata["turns"]
        assert len(turns) == 3 and all(t["context_matches"] for t in turns) and trace.reward == 1.0
        stats = result.trajectory.metadata["reconstruction"]
        assert stats["completions_total"] == 3 and stats["chains_total"] == 1 and stats["completions_merged"] == 2
    merged_updates = sum(len(r.trajectory.traces) for r in status.results)
    request_updates = sum(len(r.trajectory.traces) for r in pr_status.results)
    assert (request_updates, merged_updates) == (6, 2)
    # The same trainable tokens either way: merging only removes re-sent prompts.
    assert sum(t.trainable_tokens for r in status.results for t in r.trajectory.traces) == \
        sum(t.trainable_tokens for r in pr_status.results for t in r.trajectory.traces)

    env = {**os.environ, **stack.settings.to_env()}
    out = subprocess.run([sys.executable, "-m", "infra.cli.main", "verify", "--task", task_id,
                          "--model", "demo-policy", "--json"], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    reports = json.loads(out.stdout)
    assert len(reports) == 2
    for rep in reports:
        [trace] = rep["traces"]
        assert rep["ok"] and trace["violations"] == 0 and trace["id_mismatches"] == 0
        assert trace["max_abs_diff"] <= 1e-4 and trace["turns"] == 3 and trace["masked"] > 0


def test_verify_exits_non_zero_on_a_violation(client, demo_task, stack, tmp_path):
    demo_task.update(num_samples=1, builder={"strategy": "prefix_merging"})
    _, status = run(client, demo_task)
    [result] = status.results
    trace = result.trajectory.traces[0]
    j = trace.metadata["turns"][1]["response_start"]
    trace.response_logprobs[j].logprob -= 0.5  # as if sampled by another policy
    path = tmp_path / "result.json"
    path.write_text(result.model_dump_json())
    env = {**os.environ, **stack.settings.to_env()}
    out = subprocess.run([sys.executable, "-m", "infra.cli.main", "verify", "--file", str(path),
                          "--model", "demo-policy"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "VIOLATION" in out.stdout, out.stdout + out.stderr


def test_real_merged_trajectories_convert_for_slime_verl_and_skyrl(client, demo_task):
    """The adapters on trajectories the pipeline made: lengths agree, masks keep exactly the
    sampled tokens, every trainable token has its behaviour logprob."""
    from pipeline.trainers import groups, skyrl, slime, verl

    demo_task.update(num_samples=2, builder={"strategy": "prefix_merging"})
    _, status = run(client, demo_task)
    group = groups.Group(status.task_id, status.results, expected=2)
    assert group.complete and group.stats["usable"] == 2
    adv = groups.advantages(group)
    assert set(adv.values()) == {0.0}  # both solved the task: nothing to learn from this group
    for result in status.results:
        [trace] = result.trajectory.traces
        sample = slime.to_sample(result, reward_key="score", advantage=adv)
        assert len(sample["tokens"]) == len(trace.prompt_ids) + sample["response_length"]
        assert sum(sample["loss_mask"]) == trace.trainable_tokens > 0
        assert sample["status"] == "COMPLETED" and sample["reward"] == {"score": 1.0}
        out = verl.to_agent_loop_output(result)
        # verl's count: the user's turn, then every assistant and tool turn the session's calls made
        assert out["response_mask"] == sample["loss_mask"] and out["num_turns"] == 1 + len(trace.response_messages)
        assert [m["role"] for m in trace.prompt_messages] == ["system", "user"]
    gen = skyrl.to_generator_output(status.results)
    assert [len(m) for m in gen["loss_masks"]] == [len(r) for r in gen["response_ids"]]


def test_groups_come_off_the_stream_whole_or_as_soon_as_enough_are_usable(client, demo_task):
    """iter_groups: a plain task's group once all its sessions are in; an early-stopped task's as
    soon as its usable count is reached (its cancelled sessions, arriving later, are dropped)."""
    import copy
    import uuid

    from pipeline.trainers.stream_groups import iter_groups

    whole = dict(copy.deepcopy(demo_task), task_id=f"whole-{uuid.uuid4().hex[:6]}", num_samples=2)
    early = dict(copy.deepcopy(demo_task), task_id=f"early-{uuid.uuid4().hex[:6]}", num_samples=8,
                 early_stop_min_usable_sessions=2)
    early["agent"]["custom_shell"]["command"] += " && sleep 2"
    ids = {client.submit(whole), client.submit(early)}
    got = {}
    for g in iter_groups(client, group=f"groups-{uuid.uuid4().hex[:6]}", consumer="c0", block_ms=500,
                         stop_after=120):
        if g.task_id in ids:
            got[g.task_id] = g
        if len(got) == 2:
            break
    assert len(got[whole["task_id"]].results) == 2 and got[whole["task_id"]].stats["usable"] == 2
    assert got[early["task_id"]].stats["usable"] == 2 and len(got[early["task_id"]].results) < 8
