"""The evaluator seam: a finished session in, a reward out.

Evaluators run after the trajectory is built, with the session's runtime still up (so they can
run tests in it). ``outcome_reward`` is broadcast to every trace unless ``trace_rewards`` gives
one reward per trace.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pipeline.errors import EvaluationError
from pipeline.schemas import SessionSpec, Trajectory
from pipeline.status import Outcome
from workers.runtimes import Runtime


@dataclass
class EvalContext:
    spec: SessionSpec
    outcome: Outcome
    trajectory: Trajectory
    runtime: Runtime | None  # where to grade: the agent's, or a fresh one (evaluator.refresh_runtime)
    env: dict[str, str] = field(default_factory=dict)
    agent_runtime: Runtime | None = None  # with refresh_runtime: the agent's (to take its patch from)
    # The grading budget (evaluator.timeout_seconds from EVALUATE's start): the agent's budget
    # is not the grader's, so a slow agent cannot eat the time its tests need.
    deadline: float | None = None

    def budget(self, step_seconds: float) -> float:
        """A step's timeout: its own, cut to what is left of the grading budget."""
        if self.deadline is None:
            return step_seconds
        left = self.deadline - time.time()
        if left <= 0:
            raise EvaluationError("the grading budget (evaluator.timeout_seconds) is used up")
        return min(step_seconds, left)


@dataclass
class EvalResult:
    outcome_reward: float
    trace_rewards: list[float] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        rewards = [self.outcome_reward, *(self.trace_rewards or [])]
        if not all(isinstance(r, (int, float)) and math.isfinite(r) for r in rewards):
            raise EvaluationError(f"rewards must be finite numbers, got {rewards}")

    def apply(self, trajectory: Trajectory) -> None:
        if self.trace_rewards is not None and len(self.trace_rewards) != len(trajectory.traces):
            raise EvaluationError(
                f"{len(self.trace_rewards)} trace rewards for {len(trajectory.traces)} traces")
        for i, trace in enumerate(trajectory.traces):
            trace.reward = float(self.trace_rewards[i] if self.trace_rewards else self.outcome_reward)


@runtime_checkable
class Evaluator(Protocol):
    name: str

    def evaluate(self, ctx: EvalContext) -> EvalResult: ...


def positive_seconds(value: Any, name: str = "timeout_seconds") -> float:
    """A config's time limit: a positive, finite number (a negative one would time the grader
    out at once and grade every sample 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise TypeError(f"'{name}' must be a positive number of seconds")
    return float(value)
