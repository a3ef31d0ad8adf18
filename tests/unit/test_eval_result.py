"""Rewards as the evaluator seam takes them: finite numbers only, broadcast to every trace or one
per trace (the count must match), and a grading budget of its own."""

from __future__ import annotations

import math
import time

import pytest

from pipeline.errors import EvaluationError
from pipeline.schemas import Trajectory
from pipeline.schemas.results import Trace
from workers.evaluators.base import EvalContext, EvalResult


def trajectory(n: int) -> Trajectory:
    return Trajectory(traces=[Trace(prompt_ids=[1], response_ids=[], loss_mask=[], response_logprobs=[])
                              for _ in range(n)])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "1.0", None])
def test_non_finite_or_non_numeric_rewards_are_rejected(bad):
    with pytest.raises(EvaluationError, match="finite"):
        EvalResult(bad)  # type: ignore[arg-type]
    with pytest.raises(EvaluationError, match="finite"):
        EvalResult(1.0, trace_rewards=[0.5, bad])  # type: ignore[list-item]


def test_an_outcome_reward_reaches_every_trace_and_per_trace_rewards_their_own():
    t = trajectory(3)
    EvalResult(0.5).apply(t)
    assert [tr.reward for tr in t.traces] == [0.5, 0.5, 0.5]
    EvalResult(1.0, trace_rewards=[0.0, 0.25, 1.0]).apply(t)
    assert [tr.reward for tr in t.traces] == [0.0, 0.25, 1.0]
    with pytest.raises(EvaluationError, match="2 trace rewards for 3 traces"):
        EvalResult(1.0, trace_rewards=[0.0, 1.0]).apply(t)


def test_a_steps_timeout_is_cut_to_what_is_left_of_the_grading_budget():
    ctx = EvalContext(spec=None, outcome=None, trajectory=trajectory(0), runtime=None,  # type: ignore[arg-type]
                      deadline=time.time() + 5)
    assert 4 < ctx.budget(600) <= 5 and ctx.budget(1) == 1
    ctx.deadline = time.time() - 1
    with pytest.raises(EvaluationError, match="grading budget"):
        ctx.budget(600)
