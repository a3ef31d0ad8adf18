"""The command evaluator on a real local runtime: its exit status is the grade; running out of
time is a failed grade; a shell killed from outside is no grade at all."""

from __future__ import annotations

import time

import pytest

from pipeline.errors import EvaluationError
from pipeline.schemas import RuntimeSpec, Trajectory
from workers import runtimes
from workers.evaluators.base import EvalContext
from workers.evaluators.command import CommandEvaluator


@pytest.fixture
def rt(tmp_path):
    runtime = runtimes.create(RuntimeSpec(), "sess-eval", tmp_path)
    runtime.start()
    yield runtime
    runtime.stop()


def grade(rt, command: str, **config) -> float:
    ctx = EvalContext(spec=None, outcome=None, trajectory=Trajectory(), runtime=rt, env={},  # type: ignore[arg-type]
                      deadline=time.time() + 60)
    return CommandEvaluator(command, **config).evaluate(ctx).outcome_reward


@pytest.mark.parametrize("command, reward", [
    ("true", 1.0), ("exit 3", 0.0),
    ("python3 -c 'import os; os.abort()'", 0.0),  # what the command runs crashing: a failed grade
    ("kill -9 $$", 0.0),  # killed (by the code under test, say): still a grade, never a skipped ERROR
    ("sleep 5", 0.0),  # out of time (timeout_seconds 0.5 below): failed
])
def test_the_exit_status_is_the_grade(rt, command, reward):
    assert grade(rt, command, timeout_seconds=0.5) == reward


def test_a_runtime_torn_down_under_the_grading_is_no_grade(rt):
    import threading

    threading.Timer(0.3, rt.cancel).start()  # what a teardown does to a running command
    with pytest.raises(EvaluationError, match="torn down"):
        grade(rt, "sleep 5")
