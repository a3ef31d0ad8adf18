"""End to end: submit -> five real queues -> agent -> proxy -> real model -> results stream.

The captured numbers are checked independently of the server: prompt ids against the chat
template rendering of the recorded request, response logprobs against a teacher-forced forward
pass of the same model run here in the test.
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pipeline.status import SessionStatus, TaskState

SCRIPT = json.loads((__import__("pathlib").Path(__file__).resolve().parents[2]
                     / "examples" / "demo_policy.json").read_text())["turns"]


@pytest.fixture(scope="module")
def hf(model_dir):
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32).eval()
    return tok, model


def teacher_forced(model, prompt_ids, response_ids):
    ids = torch.tensor([prompt_ids + response_ids])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    lp = torch.log_softmax(logits, dim=-1)
    start = len(prompt_ids)
    return [lp[start - 1 + i, t].item() for i, t in enumerate(response_ids)]


def run_task(client, task, n):
    task["num_samples"] = n
    task_id = client.submit(task)
    status = client.wait(task_id, timeout=180, poll_seconds=0.3)
    results = {}
    for item in client.results(group=f"g-{task_id}", consumer="c", block_ms=200, stop_after=3):
        if item.result.task_id == task_id:
            results[item.result.session_id] = item.result
            item.ack()
        if len(results) == n:
            break
    return status, results


@pytest.mark.parametrize("stream", [True, False], ids=["streaming", "non-streaming"])
def test_rollout_is_token_faithful(client, demo_task, hf, stream):
    tok, model = hf
    demo_task["agent"]["env"]["POLAR_AGENT_STREAM"] = "1" if stream else "0"
    n = 4 if stream else 2
    status, results = run_task(client, demo_task, n)

    assert status.status == TaskState.COMPLETED
    assert status.counts == {"COMPLETED": n}
    assert set(results) == {s.session_id for s in status.results}
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    for result in results.values():
        assert result.status == SessionStatus.COMPLETED and result.reward == 1.0
        traces = result.trajectory.traces
        assert len(traces) == len(SCRIPT)  # one trace per model call of the scripted agent
        for turn, (trace, scripted) in enumerate(zip(traces, SCRIPT)):
            # The prompt is exactly the chat template's rendering of the recorded request.
            rendered = tok.apply_chat_template(trace.prompt_messages, tools=trace.tools,
                                               add_generation_prompt=True, tokenize=False)
            assert trace.prompt_ids == tok(rendered, add_special_tokens=False).input_ids
            # The response is the scripted turn, sampled ids closed by the end-of-turn token.
            assert trace.response_ids[-1] == eot
            text = tok.decode(trace.response_ids, skip_special_tokens=True)
            for call in scripted.get("tool_calls", []):
                assert json.dumps(call["arguments"]) in text
            # Every logprob is what the model assigns to that token in that context.
            want = teacher_forced(model, trace.prompt_ids, trace.response_ids)
            got = [lp.logprob for lp in trace.response_logprobs]
            assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-4
            assert trace.loss_mask == [1.0] * len(trace.response_ids)
            assert trace.reward == 1.0 and trace.metadata["session_id"] == result.session_id
            assert trace.metadata["group_id"] == "demo"
            # The conversation grows: each prompt holds the previous turns.
            assert sum(m["role"] == "assistant" for m in trace.prompt_messages) == turn
        timing = result.timing.durations_ms
        assert all(timing[k] is not None for k in ("init", "run", "postrun", "evaluate", "total"))


def test_task_status_reports_sessions_and_pipeline(client, demo_task, stack):
    status, _ = run_task(client, demo_task, 1)
    data = client.pipeline_status()
    assert set(data["queues"]) == {"init", "run", "postrun", "evaluate", "callback"}
    assert data["ready"]["capacity"] == stack.settings.ready_capacity
    assert sorted(q for qs in data["workers"].values() for q in qs) == sorted(data["queues"])
    assert data["tasks"].get("completed", 0) >= 1
    assert status.sessions[0].trainable_tokens > 0


def test_polars_agent_timeout_is_the_agents_own_budget(client, demo_task):
    """metadata.agent_timeout (Polar's): a budget of its own, from RUN's start, however much of
    the session's budget is left; what the agent did until then is still kept."""
    demo_task.update(num_samples=1, timeout_seconds=300)
    demo_task["metadata"]["agent_timeout"] = 6
    demo_task["agent"]["custom_shell"]["command"] += " && sleep 60"
    status = client.wait(client.submit(demo_task), timeout=120, poll_seconds=0.3)
    [result] = status.results
    assert result.status == SessionStatus.TIMEOUT and "6s agent_timeout" in result.error, result.error
    assert result.trajectory.traces  # the calls made before the cut
    assert status.model_dump(mode="json")["completed_sessions"] == 1


def test_every_session_is_saved_to_the_results_directory(client, stack, demo_task):
    """Real workers: CALLBACK writes each session's file (Polar's layout) before publishing;
    the status lists them and the API serves the result and the raw records."""
    from pathlib import Path

    from pipeline import results_dir

    status, results = run_task(client, demo_task, 2)
    assert status.status == TaskState.COMPLETED and len(results) == 2
    folder = results_dir.task_folder(stack.settings.results_path, status.task_id)
    assert sorted(status.result_paths) == sorted(str(folder / f"ses_{sid}.json") for sid in results)
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"ses_{sid}.json" for sid in results)
    for sid, result in results.items():
        saved = results_dir.read(Path(status.result_paths[0]).parent / f"ses_{sid}.json")
        assert saved["result"] == result == client.session(sid)
        records = client.completions(sid)["completions"]
        assert records == saved["completions"] and len(records) == len(result.trajectory.traces) > 0


def test_early_stop_cancels_the_rest_once_enough_sessions_are_usable(client, demo_task):
    """Polar's early_stop_min_usable_sessions: the second usable session stops the others (they
    end CANCELLED) and the task completes, flagged early_stopped."""
    demo_task.update(num_samples=8, early_stop_min_usable_sessions=2)
    demo_task["agent"]["custom_shell"]["command"] += " && sleep 2"
    status = client.wait(client.submit(demo_task), timeout=240, poll_seconds=0.3)
    assert status.status == TaskState.COMPLETED and status.early_stopped, status.counts
    assert status.counts.get("COMPLETED", 0) >= 2 and status.counts.get("CANCELLED", 0) >= 1, status.counts
    assert sum(status.counts.values()) == 8 and status.finished_sessions == 8
