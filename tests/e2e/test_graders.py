"""Graders through the whole pipeline: ``test_on_output`` on a real repository with a bug, the
agent's fix taken as a patch -- graded in the agent's runtime, or applied in a fresh runtime
made while the agent ran (``refresh_runtime``) -- in the local runtime (pytest) and in a podman
container (unittest, the test image has no pytest)."""

from __future__ import annotations

import pytest

from pipeline.status import SessionStatus
from tests.conftest import TEST_IMAGE

REPO = (
    "git init -q . && git config user.email t@t && git config user.name t && "
    "printf 'def add(a, b):\\n    return a - b\\n' > calc.py && "
    "printf 'import unittest\\nfrom calc import add\\n\\n\\nclass TestAdd(unittest.TestCase):\\n"
    "    def test_small(self):\\n        self.assertEqual(add(1, 2), 3)\\n\\n"
    "    def test_zero(self):\\n        self.assertEqual(add(0, 0), 0)\\n' > test_calc.py && "
    "git add -A && git commit -qm base"
)
ASK = ("import json, os, urllib.request as u; u.urlopen(u.Request(os.environ['OPENAI_BASE_URL'] + "
       "'/chat/completions', json.dumps({'model': 'demo-policy', 'messages': [{'role': 'user', 'content': 'fix'}]})"
       ".encode(), {'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY'], 'content-type': 'application/json'}))")
FIX = "sed -i 's/a - b/a + b/' calc.py"
WRONG = "sed -i 's/a - b/a * b/' calc.py"
RUNNERS = {  # backend -> (runtime fields, test command, expected statuses)
    "local": ({"backend": "local"}, "python -m pytest -p no:cacheprovider -rA test_calc.py",
              {"test_calc.py::TestAdd::test_small": "PASSED", "test_calc.py::TestAdd::test_zero": "PASSED"}),
    "docker": ({"backend": "docker", "image": TEST_IMAGE}, "python3 -m unittest -v test_calc",
               {"test_small (test_calc.TestAdd.test_small)": "PASSED",
                "test_zero (test_calc.TestAdd.test_zero)": "PASSED"}),
}


def grader_task(demo_task, backend: str, agent_command: str, refresh: bool) -> dict:
    runtime, command, expected = RUNNERS[backend]
    demo_task["runtime"] = {**runtime, "prepare": [{"type": "exec", "command": REPO}],
                            **({"eval_prepare": [{"type": "exec", "command": REPO}]} if refresh else {})}
    # The fix, and one model call through the proxy (a session without one is an error).
    demo_task["agent"] = {"custom_shell": f"{agent_command} && python3 -c {ASK!r}", "model_name": "demo-policy"}
    demo_task["evaluator"] = {"strategy": "test_on_output", "refresh_runtime": refresh, "timeout_seconds": 300,
                              "config": {"command": command, "expected_output_json": expected}}
    demo_task["num_samples"] = 1
    return demo_task


@pytest.fixture
def needs_backend(request, engine):
    def _needs(backend: str) -> None:
        if backend == "docker" and engine is None:
            pytest.skip("podman is not installed")
    return _needs


@pytest.mark.parametrize("refresh", [False, True], ids=["agent-runtime", "fresh-runtime"])
@pytest.mark.parametrize("backend", list(RUNNERS))
def test_a_correct_fix_passes_and_a_wrong_one_does_not(backend, refresh, client, demo_task, needs_backend):
    needs_backend(backend)
    import copy

    fixed = client.submit(grader_task(copy.deepcopy(demo_task), backend, FIX, refresh))
    wrong = client.submit({**grader_task(copy.deepcopy(demo_task), backend, WRONG, refresh),
                           "task_id": demo_task["task_id"] + "-wrong"})
    [good] = client.wait(fixed, timeout=300, poll_seconds=0.3).results
    [bad] = client.wait(wrong, timeout=300, poll_seconds=0.3).results
    assert good.status == SessionStatus.COMPLETED and good.reward == 1.0, (good.error, good.evaluation)
    assert good.evaluation["patch_files"] == ["calc.py"]
    assert bad.reward == 0.0 and "test_small" in str(bad.evaluation["mismatches"]), bad.evaluation
    if refresh:  # the fix moved into the fresh runtime as a patch, and was graded there
        assert good.evaluation["patch_applied"] and good.evaluation["apply_method"] == "git apply"
        t = good.timing
        assert t.eval_runtime_ready_at is not None and t.eval_runtime_ready_at <= t.run_ended_at + 1e-3


def test_an_agent_that_changed_nothing_scores_zero_as_an_empty_generation(client, demo_task):
    [result] = client.wait(client.submit(grader_task(demo_task, "local", "true", True)), timeout=300,
                           poll_seconds=0.3).results
    assert result.reward == 0.0 and result.evaluation["empty_generation"] is True, result.evaluation


def test_grading_has_its_own_budget(client, demo_task):
    """A grader slower than evaluator.timeout_seconds is stopped at its own deadline, however much
    of the agent's budget is left."""
    task = grader_task(demo_task, "local", FIX, False)
    task["evaluator"]["timeout_seconds"] = 2
    task["evaluator"]["config"]["command"] = "sleep 30"
    [result] = client.wait(client.submit(task), timeout=300, poll_seconds=0.3).results
    assert result.reward == 0.0 and result.evaluation.get("timed_out") is True, result.evaluation
