"""``session_completed``: reward 1.0 when the agent ran to completion (exit 0, in time)."""

from __future__ import annotations

from pipeline.status import Outcome
from workers.evaluators.base import EvalContext, EvalResult


class SessionCompletedEvaluator:
    name = "session_completed"

    def __init__(self, **config: object) -> None:
        if config:
            raise TypeError(f"session_completed takes no config, got {sorted(config)}")

    def evaluate(self, ctx: EvalContext) -> EvalResult:
        done = ctx.outcome == Outcome.COMPLETED
        return EvalResult(1.0 if done else 0.0, metadata={"completed": done})
