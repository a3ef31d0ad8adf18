"""SkyRL ``GeneratorOutput`` fields (``skyrl/train/generators/base.py``) from a group of session
results, in the order given.

By default one sequence per session (SkyRL asserts one output per input prompt): the session's
main trace (``groups.main_trace``). ``step_wise=True`` gives every trace of a session as a step
(SkyRL's step-wise training: ``is_last_step`` marks a session's last, which carries the outcome
reward; earlier steps 0.0). ``trajectory_ids`` are SkyRL's ``TrajectoryID`` when SkyRL is
installed, else dicts of the same fields (task id, sample index). A session SkyRL must not learn
from (not ``groups.usable``) keeps its sequence with a zero mask; one that made no model call (or
sampled no token) is a one-token placeholder (``groups.PLACEHOLDER_TOKEN``) with a zero mask. Their reward is their task's
``groups.neutral_reward`` (the mean of its usable sessions' rewards in ``results``): SkyRL's GRPO
takes its baseline over every sequence of a prompt's group, masked ones included, and 0.0 there
raised the advantages of the group's usable sessions (``neutral_fill=False``: 0.0).
``prompt_length`` / ``response_length`` cut each sequence as verl's adapter does (a response to
its first tokens, stop reason ``length``; an overlong prompt to its last, and that sequence then
trains nothing, with the fill reward): set them to what the trainer was configured for, so one
long session cannot make a batch the trainer cannot hold; counted in ``rollout_metrics``.
"""

from __future__ import annotations

from typing import Any

from pipeline.schemas import SessionResult
from pipeline.trainers.groups import (
    PLACEHOLDER_TOKEN,
    fit_lengths,
    main_trace,
    neutral_reward,
    row_logprobs,
    sampled_nothing,
    trace_versions,
    training_reward,
    usable,
)


def to_generator_output(results: list[SessionResult], *, step_wise: bool = False, neutral_fill: bool = True,
                        prompt_length: int | None = None, response_length: int | None = None) -> dict[str, Any]:
    out: dict[str, list[Any]] = {k: [] for k in ("prompt_token_ids", "response_ids", "rewards", "loss_masks",
                                                 "stop_reasons", "rollout_logprobs", "trajectory_ids",
                                                 "is_last_step", "policy_versions")}
    make_id = _trajectory_id()
    by_task: dict[str, list[SessionResult]] = {}
    for r in results:
        by_task.setdefault(r.task_id, []).append(r)
    fill = {task: neutral_reward(rs) if neutral_fill else 0.0 for task, rs in by_task.items()}
    responses_cut = prompts_overlong = 0
    for r in results:
        if sampled_nothing(r):
            for key, value in (("prompt_token_ids", [PLACEHOLDER_TOKEN]), ("response_ids", [PLACEHOLDER_TOKEN]),
                               ("rewards", fill[r.task_id]), ("loss_masks", [0]), ("stop_reasons", r.status.value.lower()),
                               ("rollout_logprobs", [0.0]), ("is_last_step", True), ("policy_versions", []),
                               ("trajectory_ids", make_id(instance_id=r.task_id, repetition_id=r.sample_index))):
                out[key].append(value)
            continue
        traces = r.trajectory.traces
        # (step-wise: a trace of an empty completion is no step; the session has a non-empty one)
        indexes = [i for i, t in enumerate(traces) if t.response_ids] if step_wise else [main_trace(r)]
        trains = usable(r)
        for n, i in enumerate(indexes):
            t, last = traces[i], n == len(indexes) - 1
            mask = [int(m) for m in t.loss_mask] if trains else [0] * len(t.response_ids)
            row: dict[str, list[Any]] = {
                "prompt_token_ids": list(t.prompt_ids), "response_ids": list(t.response_ids),
                "loss_masks": mask, "rollout_logprobs": row_logprobs(r, i, mask)}
            cut, overlong = fit_lengths(row, prompt_length, response_length, "prompt_token_ids",
                                        ("response_ids", "loss_masks", "rollout_logprobs"))
            responses_cut, prompts_overlong = responses_cut + cut, prompts_overlong + overlong
            for key, value in row.items():
                out[key].append(value)
            reward = training_reward(r, i) if trains and not overlong else fill[r.task_id]
            out["rewards"].append(reward if last else 0.0)
            # a cut response ended at the length limit, as SkyRL's own generator says of one it cuts
            out["stop_reasons"].append("length" if cut else t.finish_reason or r.status.value.lower())
            out["trajectory_ids"].append(make_id(instance_id=r.task_id, repetition_id=r.sample_index))
            out["is_last_step"].append(last)
            out["policy_versions"].append(trace_versions(r, i))  # who sampled the sequence's tokens
    statuses = [r.status.value for r in results]
    inexact = sum(1 for r in results for t in r.trajectory.traces if t.metadata.get("context_exact") is False)
    return {**out, "rollout_metrics": {"sessions": len(results), "completed": statuses.count("COMPLETED"),
                                       "trained": sum(usable(r) for r in results),
                                       "sequences": len(out["response_ids"]), "inexact_context_traces": inexact,
                                       "responses_cut": responses_cut, "overlong_prompts": prompts_overlong}}


def _trajectory_id() -> Any:
    for module in ("skyrl.train.generators.base", "skyrl_train.generators.base"):
        try:
            return __import__(module, fromlist=["TrajectoryID"]).TrajectoryID
        except ImportError:
            continue
    return dict
