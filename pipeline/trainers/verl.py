"""verl agent-loop output fields (``AgentLoopOutput`` in ``verl/experimental/agent_loop``) from a
session result. ``response_mask`` is 1 where the policy sampled, 0 for tool and template tokens
in between; ``reward_score`` is a float (verl puts it on the last response token).

``to_agent_loop_output``: the one output an agent loop returns per sample -- the session's main
trace (``groups.main_trace``), cut to verl's ``response_length`` as verl's own tool agent loop
cuts it. A session verl must not learn from (not ``groups.usable``: an error, a timeout, a
cancel, no finite reward) or whose prompt exceeds ``prompt_length`` keeps its row with a zero
mask and reward ``fill_reward``, so the batch keeps its shape; one that made no model call (or
sampled no token) is a one-token placeholder (``groups.PLACEHOLDER_TOKEN``) with a zero mask, ``extra_fields["no_model_call"]``.
verl's GRPO takes its baseline over every row of the group, masked ones included: pass
``fill_reward=groups.neutral_reward(<the group's results>)`` (the default 0.0 lowers the baseline
of a group with such a session, and raises its usable sessions' advantages).
``to_agent_loop_outputs``: every trace, for users who split sessions themselves.
"""

from __future__ import annotations

from typing import Any

from pipeline.schemas import SessionResult
from pipeline.trainers.groups import (
    PLACEHOLDER_TOKEN,
    fit_lengths,
    made_no_call,
    main_trace,
    row_logprobs,
    sample_versions,
    sampled_nothing,
    training_reward,
    usable,
)


def to_agent_loop_output(result: SessionResult, *, prompt_length: int | None = None,
                         response_length: int | None = None, fill_reward: float = 0.0) -> dict[str, Any]:
    if sampled_nothing(result):
        return _placeholder(result, fill_reward)
    index = main_trace(result)
    out = _output(result, index, fill_reward)
    left_out = len(result.trajectory.traces) - 1
    if left_out:
        out["extra_fields"]["traces_left_out"] = left_out  # side conversations (a title call, a sub-agent)
    cut, overlong = fit_lengths(out, prompt_length, response_length, "prompt_ids",
                                ("response_ids", "response_mask", "response_logprobs"))
    if cut:
        out["extra_fields"]["response_cut"] = True
    if overlong:
        out["reward_score"] = fill_reward
        out["extra_fields"]["overlong_prompt"] = True
    return out


def to_agent_loop_outputs(result: SessionResult) -> list[dict[str, Any]]:
    return [_output(result, i) for i in range(len(result.trajectory.traces))]


def _output(result: SessionResult, i: int, fill_reward: float = 0.0) -> dict[str, Any]:
    t = result.trajectory.traces[i]
    trains = usable(result)
    mask = [int(m) for m in t.loss_mask] if trains else [0] * len(t.response_ids)
    messages = [m for m in (*t.prompt_messages, *t.response_messages) if m.get("role") != "system"]
    return {
        "prompt_ids": list(t.prompt_ids), "response_ids": list(t.response_ids),
        "response_mask": mask, "response_logprobs": row_logprobs(result, i, mask),
        "reward_score": training_reward(result, i) if trains else fill_reward,
        "num_turns": len(messages) or 1,  # user, assistant and tool turns, as verl counts them
        "metrics": {}, "multi_modal_data": {},
        "extra_fields": {"session_id": result.session_id, "task_id": result.task_id, "trace_index": i,
                         "status": result.status.value, "trained": trains,
                         # False: a merged turn's context drifted from what the policy saw (prefix merging)
                         "context_exact": t.metadata.get("context_exact", True),
                         # the oldest version that sampled any of the session's tokens, and the trace's own
                         **sample_versions(result, i)},
    }


def _placeholder(result: SessionResult, fill_reward: float = 0.0) -> dict[str, Any]:
    return {"prompt_ids": [PLACEHOLDER_TOKEN], "response_ids": [PLACEHOLDER_TOKEN], "response_mask": [0],
            "response_logprobs": [0.0], "reward_score": fill_reward, "num_turns": 1, "metrics": {}, "multi_modal_data": {},
            "extra_fields": {"session_id": result.session_id, "task_id": result.task_id, "trace_index": None,
                             "status": result.status.value, "trained": False, "no_model_call": made_no_call(result),
                             "context_exact": True}}
