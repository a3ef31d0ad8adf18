"""GRPO groups: a task's ``num_samples`` sessions are one group. Advantages come from the
session rewards of the group -- group-normalised (GRPO) or leave-one-out -- and every trace of a
session gets its session's advantage (one session may be split into several traces: one
conversation per sub-agent or title call, one sequence per drifted turn).

``usable``: a session the trainer can learn from -- COMPLETED (or TIMEOUT, when asked), a finite
reward, at least one trainable token. ``stale``: a session sampled by a policy version more than
``max_lag`` behind the trainer's.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Literal

from pipeline.schemas import SessionResult
from pipeline.status import SessionStatus


def trainable_tokens(result: SessionResult) -> int:
    return sum(t.trainable_tokens for t in result.trajectory.traces)


def usable(result: SessionResult, include_timeouts: bool = False) -> bool:
    ok = {SessionStatus.COMPLETED, *([SessionStatus.TIMEOUT] if include_timeouts else [])}
    return (result.status in ok and result.reward is not None and math.isfinite(result.reward)
            and trainable_tokens(result) > 0)


def policy_version(result: SessionResult) -> int | None:
    raw = result.metadata.get("policy_version")
    for trace in result.trajectory.traces:
        raw = trace.metadata.get("policy_version", raw)  # the version that actually sampled it
    try:
        return int(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None


def stale(result: SessionResult, current_version: int, max_lag: int) -> bool:
    """Sampled by a policy more than ``max_lag`` versions behind ``current_version`` (unknown: stale)."""
    version = policy_version(result)
    return version is None or current_version - version > max_lag


@dataclass
class Group:
    task_id: str
    results: list[SessionResult]
    expected: int  # the task's num_samples
    stats: dict[str, float] = field(default_factory=dict)
    # Set by ``stream_groups.iter_groups``: acks the group's stream entries now (idempotent).
    on_ack: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        rewards = [float(r.reward) for r in self.usable() if r.reward is not None]
        self.stats = {
            "sessions": len(self.results), "usable": len(rewards),
            "reward_mean": sum(rewards) / len(rewards) if rewards else float("nan"),
            "reward_std": _std(rewards) if rewards else float("nan"),
            "trainable_tokens": sum(trainable_tokens(r) for r in self.results),
            **{f"status_{k.lower()}": v for k, v in Counter(r.status.value for r in self.results).items()},
        }

    def ack(self) -> None:
        """The group is taken (``iter_groups``): not delivered again, also if the loop breaks
        right after. Without it, a group is acked when the loop asks for the next one."""
        if self.on_ack is not None:
            self.on_ack()

    def usable(self, include_timeouts: bool = False) -> list[SessionResult]:
        return [r for r in self.results if usable(r, include_timeouts)]

    @property
    def complete(self) -> bool:
        return len(self.results) >= self.expected


def _std(xs: list[float]) -> float:
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))


def advantages(group: Group, method: Literal["grpo", "loo"] = "grpo", eps: float = 1e-6,
               include_timeouts: bool = False) -> dict[tuple[str, int], float]:
    """``{(session_id, trace_index): advantage}`` over the group's usable sessions.

    grpo: (r - mean) / (std + eps). loo (leave-one-out): r - mean of the others' rewards. A group
    with one usable session, or all rewards equal, teaches nothing: every advantage is 0.
    """
    sessions = group.usable(include_timeouts)
    rewards = [float(r.reward or 0.0) for r in sessions]  # usable: never None
    n = len(rewards)
    if n < 2:
        per_session = [0.0] * n
    elif method == "grpo":
        mean, std = sum(rewards) / n, _std(rewards)
        per_session = [(r - mean) / (std + eps) for r in rewards]
    elif method == "loo":
        total = sum(rewards)
        per_session = [r - (total - r) / (n - 1) for r in rewards]
    else:
        raise ValueError(f"unknown advantage method {method!r}: grpo or loo")
    return {(s.session_id, i): a for s, a in zip(sessions, per_session) for i in range(len(s.trajectory.traces))}
