"""Evaluator configs a grader cannot honour are refused when the evaluator is built, never
graded as a silent 0: a bare string of exclude patterns (taken one character at a time, "."
excluded everything: every sample empty_generation), a time limit of no time at all (every
sample timed out), no exit code counted as success."""

from __future__ import annotations

import pytest

from pipeline.errors import EvaluationError
from workers import evaluators

TESTS = {"command": "pytest -rA", "expected_output_json": {"t.py::test_a": "PASSED"}}


@pytest.mark.parametrize("strategy, config, message", [
    ("test_on_output", {**TESTS, "exclude_patterns": "conftest.py"}, "exclude_patterns"),
    ("test_on_output", {**TESTS, "exclude_patterns": ["ok", ""]}, "exclude_patterns"),
    ("test_on_output", {**TESTS, "timeout_seconds": -3}, "timeout_seconds"),
    ("test_on_output", {**TESTS, "timeout_seconds": float("inf")}, "timeout_seconds"),
    ("command", {"command": "true", "timeout_seconds": 0}, "timeout_seconds"),
    ("command", {"command": "true", "timeout_seconds": True}, "timeout_seconds"),
    ("command", {"command": "true", "success_exit_codes": []}, "success_exit_codes"),
    ("command", {"command": "true", "success_exit_codes": ["0"]}, "success_exit_codes"),
])
def test_a_config_no_grader_can_honour_is_refused_when_built(strategy, config, message):
    with pytest.raises(EvaluationError, match=message):
        evaluators.create(strategy, config)


def test_good_configs_still_build():
    assert evaluators.create("test_on_output", {**TESTS, "exclude_patterns": ["**/conftest.py"], "timeout_seconds": 5})
    assert evaluators.create("command", {"command": "true", "timeout_seconds": 1.5, "success_exit_codes": [0, 3]})


def test_an_exclude_pattern_that_is_no_glob_is_refused_when_built():
    with pytest.raises(EvaluationError, match="not a glob"):
        evaluators.create("test_on_output", {**TESTS, "exclude_patterns": ["[z-a]"]})
