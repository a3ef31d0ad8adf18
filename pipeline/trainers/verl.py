"""verl agent-loop output fields (``AgentLoopOutput`` in ``verl/experimental/agent_loop``) from a
session result: one output per trace; ``response_mask`` 1 where the policy sampled, 0 for tool
and template tokens in between."""

from __future__ import annotations

from typing import Any

from pipeline.schemas import SessionResult


def to_agent_loop_outputs(result: SessionResult) -> list[dict[str, Any]]:
    return [{
        "prompt_ids": list(t.prompt_ids), "response_ids": list(t.response_ids),
        "response_mask": [int(m) for m in t.loss_mask],
        "response_logprobs": [lp.logprob for lp in t.response_logprobs],
        "reward_score": t.reward if t.reward is not None else result.reward,
        "num_turns": len(t.metadata.get("turns") or []) or 1,
        "metrics": {}, "multi_modal_data": {},
        "extra_fields": {"session_id": result.session_id, "task_id": result.task_id, "trace_index": i,
                         "status": result.status.value},
    } for i, t in enumerate(result.trajectory.traces)]
