"""SkyRL ``GeneratorOutput`` fields (``skyrl/train/generators/base.py``) from a group of session
results: one sequence per trace, ``trajectory_ids`` as ``{instance_id, repetition_id}`` (the task
and the sample index)."""

from __future__ import annotations

from typing import Any

from pipeline.schemas import SessionResult


def to_generator_output(results: list[SessionResult]) -> dict[str, Any]:
    out: dict[str, list[Any]] = {k: [] for k in ("prompt_token_ids", "response_ids", "rewards", "loss_masks",
                                                 "stop_reasons", "rollout_logprobs", "trajectory_ids")}
    for r in results:
        for t in r.trajectory.traces:
            out["prompt_token_ids"].append(list(t.prompt_ids))
            out["response_ids"].append(list(t.response_ids))
            out["rewards"].append(t.reward if t.reward is not None else r.reward)
            out["loss_masks"].append([int(m) for m in t.loss_mask])
            out["stop_reasons"].append(t.finish_reason or r.status.value.lower())
            out["rollout_logprobs"].append([lp.logprob for lp in t.response_logprobs])
            out["trajectory_ids"].append({"instance_id": r.task_id, "repetition_id": r.sample_index})
    statuses = [r.status.value for r in results]
    return {**out, "rollout_metrics": {"sessions": len(results),
                                       "completed": statuses.count("COMPLETED"),
                                       "sequences": len(out["response_ids"])}}
