"""slime ``Sample`` fields (``slime/utils/types.py``) from a session result: one sample per trace.

``tokens`` = prompt + response ids, ``response_length``, ``loss_mask`` (one per response token),
``rollout_log_probs`` (the behaviour policy's, one per response token), ``reward`` (a float, or
``{reward_key: value}``), ``status`` (TIMEOUT -> ABORTED, ERROR/CANCELLED -> FAILED, a length
cut -> TRUNCATED, else COMPLETED); aborted and failed samples train on nothing (all-zero mask). ``rollout_log_probs`` are finite
throughout (``groups.row_logprobs``: a trainable token without one raises ``RolloutLogprobError``).
``to_samples(..., sample_cls=Sample)`` builds slime's own objects; without it, dicts.

``to_sample``: the one sample of a session (its main trace, ``groups.main_trace``), what a
group of ``n_samples_per_prompt`` needs: a session that made no model call (or whose calls
sampled no token) is a FAILED placeholder of two tokens (``groups.PLACEHOLDER_TOKEN``; one masked response token: slime packs
no empty sequence), so the group keeps its size. Any session that is not ``groups.usable`` (also
one COMPLETED without a finite reward) trains nothing: its reward is ``fill_reward``, its mask
zero, and ``remove_sample`` is set (slime's own flag for a sample kept only for the batch's
shape). slime's reward normalisation reshapes the rewards by ``n_samples_per_prompt``, such rows
included: pass ``fill_reward=groups.neutral_reward(<the group's results>)`` (``slime_rollout``
does), or the default 0.0 lowers the group's baseline and raises its usable samples' advantages.
"""

from __future__ import annotations

from typing import Any

from pipeline.schemas import SessionResult
from pipeline.status import SessionStatus
from pipeline.trainers.groups import (
    PLACEHOLDER_TOKEN,
    made_no_call,
    main_trace,
    row_logprobs,
    sample_versions,
    sampled_nothing,
    training_reward,
    usable,
)
from pipeline.trainers.groups import RolloutLogprobError as RolloutLogprobError  # (raised here, as before)

STATUS = {SessionStatus.TIMEOUT: "ABORTED", SessionStatus.ERROR: "FAILED", SessionStatus.CANCELLED: "FAILED"}


def sample_status(result: SessionResult, finish_reason: str | None) -> str:
    if result.status in STATUS:
        return STATUS[result.status]
    return "TRUNCATED" if finish_reason == "length" else "COMPLETED"


def to_samples(result: SessionResult, *, group_index: int | None = None, reward_key: str | None = None,
               advantage: dict[tuple[str, int], float] | None = None, max_tokens: int | None = None,
               sample_cls: Any = None, fill_reward: float = 0.0) -> list[Any]:
    """One sample per trace (a per-request trajectory's calls, each its own sample)."""
    out = []
    for i, t in enumerate(result.trajectory.traces):
        if not t.response_ids or (max_tokens is not None and len(t.prompt_ids) + len(t.response_ids) > max_tokens):
            continue  # nothing to train on, or more than the trainer takes
        out.append(_sample(result, i, group_index, reward_key, advantage, sample_cls, fill_reward=fill_reward))
    return out


def to_sample(result: SessionResult, *, group_index: int | None = None, reward_key: str | None = None,
              advantage: dict[tuple[str, int], float] | None = None, sample_cls: Any = None,
              fill_reward: float = 0.0) -> Any:
    """The session's one sample (its main trace; a session without a model call: a FAILED placeholder)."""
    if sampled_nothing(result):
        fields: dict[str, Any] = {
            "group_index": group_index, "index": result.sample_index, "session_id": result.session_id, "prompt": [],
            "tokens": [PLACEHOLDER_TOKEN, PLACEHOLDER_TOKEN], "response_length": 1, "loss_mask": [0],
            "rollout_log_probs": [0.0], "reward": {reward_key: fill_reward} if reward_key else fill_reward,
            "status": "FAILED",
            "remove_sample": True,
            "metadata": {"polar": {"task_id": result.task_id, "session_status": result.status.value, "trained": False,
                                   "no_model_call": made_no_call(result)}}}
        return _build(sample_cls, fields)
    return _sample(result, main_trace(result), group_index, reward_key, advantage, sample_cls,
                   index=result.sample_index, fill_reward=fill_reward)


def _sample(result: SessionResult, i: int, group_index: int | None, reward_key: str | None,
            advantage: dict[tuple[str, int], float] | None, sample_cls: Any, index: int | None = None,
            fill_reward: float = 0.0) -> Any:
    t = result.trajectory.traces[i]
    status, trains = sample_status(result, t.finish_reason), usable(result)
    mask = [int(m) for m in t.loss_mask] if trains else [0] * len(t.response_ids)
    reward = training_reward(result, i) if trains else fill_reward
    fields = {
        "group_index": group_index, "index": i if index is None else index, "session_id": result.session_id,
        "prompt": t.prompt_messages, "tokens": [*t.prompt_ids, *t.response_ids], "response_length": len(t.response_ids),
        "loss_mask": mask, "rollout_log_probs": row_logprobs(result, i, mask), "reward": {reward_key: reward} if reward_key else reward,
        "status": status, "remove_sample": not trains,
        "metadata": {"polar": {"task_id": result.task_id, "trace_index": i, "session_status": result.status.value,
                               "trained": trains, "context_exact": t.metadata.get("context_exact", True),
                               **sample_versions(result, i),
                               **({"advantage": advantage[(result.session_id, i)]}
                                                     if advantage and (result.session_id, i) in advantage else {})}},
    }
    return _build(sample_cls, fields)


def _build(sample_cls: Any, fields: dict[str, Any]) -> Any:
    if sample_cls is None:
        return fields
    status_enum = getattr(sample_cls, "Status", None)
    if status_enum is not None:
        fields = {**fields, "status": status_enum[fields["status"]]}
    if "remove_sample" not in getattr(sample_cls, "__dataclass_fields__", {"remove_sample": None}):
        fields = {k: v for k, v in fields.items() if k != "remove_sample"}  # an older slime: the zero mask alone
    return sample_cls(**fields)
