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


FORGED = '''import atexit, os
atexit.register(lambda: os.write(2, b"PASSED test_calc.py::test_sub\\n"))
'''


def test_passed_lines_printed_by_the_code_under_test_do_not_grade_a_failing_test(rt):
    """The probe's forgery: the module under test prints the summary line its failing test would
    have, after pytest's own (stderr, read after stdout). The worst status a test is reported
    with is its status, and a failed run with every expected test passing is a failed grade."""
    from workers.evaluators.test_on_output import TestOnOutputEvaluator

    rt.write("/polar/session/workspace/calc.py", FORGED.encode() + b"def sub(a, b):\n    return a + b\n")
    rt.write("/polar/session/workspace/test_calc.py",
             b"from calc import sub\n\ndef test_sub():\n    assert sub(3, 1) == 2\n")
    evaluator = TestOnOutputEvaluator("python3 -m pytest -p no:cacheprovider -rA test_calc.py",
                                      {"test_calc.py::test_sub": "PASSED"}, require_patch=False)
    ctx = EvalContext(spec=None, outcome=None, trajectory=Trajectory(), runtime=rt, env={},  # type: ignore[arg-type]
                      deadline=time.time() + 60)
    result = evaluator.evaluate(ctx)
    assert result.outcome_reward == 0.0
    assert result.metadata["tests"] == {"test_calc.py::test_sub": "FAILED"} and result.metadata["exit_code"] == 1
    rt.write("/polar/session/workspace/calc.py", b"def sub(a, b):\n    return a - b\n")  # the real fix passes
    assert evaluator.evaluate(ctx).outcome_reward == 1.0


@pytest.mark.parametrize("runner, forger", [
    # unittest -v: "ok" written where the runner's FAIL goes, and exit 0 at interpreter exit
    ("python3 -m unittest -v test_calc",
     'import atexit, os\nos.write(2, b"ok\\n")\natexit.register(lambda: os._exit(0))\n'),
    # pytest: passes written past its capture into the run's log, then exit 0 before it reports
    ("python3 -m pytest -p no:cacheprovider -v test_calc.py",
     'import os\nreal = os.open(os.environ["POLAR_SESSION_DIR"] + "/logs/tests.stdout", os.O_WRONLY | os.O_APPEND)\n'
     'os.write(real, b"\\ntest_calc.py::T::test_sub PASSED [100%]\\n")\nos._exit(0)\n'),
])
def test_code_under_test_that_reports_its_own_pass_and_exits_0_fails(rt, runner, forger):
    """The probe's two forgeries of this stop's own fix: a failing test reported as passed by the
    code it tests, the run ended with exit 0 before the runner could say otherwise."""
    from workers.evaluators.test_on_output import TestOnOutputEvaluator

    unittest_ids = runner.startswith("python3 -m unittest")
    rt.write("/polar/session/workspace/calc.py", b"def sub(a, b):\n" + b"".join(
        b"    " + line.encode() + b"\n" for line in forger.splitlines()) + b"    return a + b\n")
    rt.write("/polar/session/workspace/test_calc.py", b"import unittest\nfrom calc import sub\n\n"
             b"class T(unittest.TestCase):\n    def test_sub(self):\n        self.assertEqual(sub(3, 1), 2)\n")
    expected = {"test_sub (test_calc.T.test_sub)": "PASSED"} if unittest_ids else {"test_calc.py::T::test_sub": "PASSED"}
    evaluator = TestOnOutputEvaluator(runner, expected, require_patch=False)
    ctx = EvalContext(spec=None, outcome=None, trajectory=Trajectory(), runtime=rt, env={},  # type: ignore[arg-type]
                      deadline=time.time() + 60)
    result = evaluator.evaluate(ctx)
    assert result.outcome_reward == 0.0, result.metadata
    rt.write("/polar/session/workspace/calc.py", b"def sub(a, b):\n    return a - b\n")  # the real fix passes
    assert evaluator.evaluate(ctx).outcome_reward == 1.0
