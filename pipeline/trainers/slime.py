"""slime ``Sample`` fields (``slime/utils/types.py``) from a session result: one sample per trace.

``tokens`` = prompt + response ids, ``response_length``, ``loss_mask`` (one per response token),
``rollout_log_probs`` (the behaviour policy's, one per response token), ``reward`` (a float, or
``{reward_key: value}``), ``status`` (TIMEOUT -> ABORTED, ERROR/CANCELLED -> FAILED, a length
cut -> TRUNCATED, else COMPLETED); aborted and failed samples train on nothing (all-zero mask).
``to_samples(..., sample_cls=Sample)`` builds slime's own objects; without it, dicts.
"""

from __future__ import annotations

import math
from typing import Any

from pipeline.schemas import SessionResult
from pipeline.status import SessionStatus

STATUS = {SessionStatus.TIMEOUT: "ABORTED", SessionStatus.ERROR: "FAILED", SessionStatus.CANCELLED: "FAILED"}


class RolloutLogprobError(ValueError):
    """A trainable token without a finite behaviour logprob: training on it would be wrong."""


def sample_status(result: SessionResult, finish_reason: str | None) -> str:
    if result.status in STATUS:
        return STATUS[result.status]
    return "TRUNCATED" if finish_reason == "length" else "COMPLETED"


def to_samples(result: SessionResult, *, group_index: int | None = None, reward_key: str | None = None,
               advantage: dict[tuple[str, int], float] | None = None, max_tokens: int | None = None,
               sample_cls: Any = None) -> list[Any]:
    out = []
    for i, t in enumerate(result.trajectory.traces):
        tokens = [*t.prompt_ids, *t.response_ids]
        if not t.response_ids or (max_tokens is not None and len(tokens) > max_tokens):
            continue  # nothing to train on, or more than the trainer takes
        logprobs = [lp.logprob for lp in t.response_logprobs]
        bad = [j for j, (m, lp) in enumerate(zip(t.loss_mask, logprobs)) if m and not math.isfinite(lp)]
        if bad:
            raise RolloutLogprobError(f"{result.session_id} trace {i}: trainable tokens {bad[:5]} have no logprob")
        status = sample_status(result, t.finish_reason)
        reward = t.reward if t.reward is not None else result.reward
        fields = {
            "group_index": group_index, "index": i, "session_id": result.session_id,
            "prompt": t.prompt_messages, "tokens": tokens, "response_length": len(t.response_ids),
            "loss_mask": [0] * len(t.response_ids) if status in ("ABORTED", "FAILED") else [int(m) for m in t.loss_mask],
            "rollout_log_probs": logprobs, "reward": {reward_key: reward} if reward_key else reward,
            "status": status,
            "metadata": {"polar": {"task_id": result.task_id, "trace_index": i, "session_status": result.status.value,
                                   **({"advantage": advantage[(result.session_id, i)]}
                                      if advantage and (result.session_id, i) in advantage else {})}},
        }
        out.append(_build(sample_cls, fields))
    return out


def _build(sample_cls: Any, fields: dict[str, Any]) -> Any:
    if sample_cls is None:
        return fields
    status_enum = getattr(sample_cls, "Status", None)
    if status_enum is not None:
        fields = {**fields, "status": status_enum[fields["status"]]}
    return sample_cls(**fields)
