"""``test_on_output``: run the tests, parse each test's status, reward 1 only when the parsed map
equals ``expected_output_json`` (the paper's test-on-output grader).

Config: ``command`` (the test command, e.g. ``python -m pytest -rA tests``), ``expected_output_json``
(``{test id: PASSED|FAILED|ERROR|SKIPPED}``, a dict or its JSON text), ``framework`` (pytest,
unittest, auto), ``repo_dir`` (where the repository is; default the working directory),
``base_commit`` (default HEAD), ``exclude_patterns``, ``timeout_seconds`` (default 600),
``require_patch`` (default true: an agent that changed nothing scores 0, ``empty_generation``).
With ``refresh_runtime`` the agent's patch is applied in the fresh runtime first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.errors import EvaluationError
from workers.evaluators import patch, test_output
from workers.evaluators.base import EvalContext, EvalResult, positive_seconds
from workers.evaluators.grading import patched_runtime
from workers.runtimes.base import read_in

WHOLE_OUTPUT_BYTES = 64 * 2**20  # of each stream of a test run: test reports are far smaller


class TestOnOutputEvaluator:
    name = "test_on_output"

    def __init__(self, command: str, expected_output_json: dict[str, str] | str, framework: str = "auto",
                 repo_dir: str = ".", base_commit: str = "HEAD", exclude_patterns: list[str] | None = None,
                 timeout_seconds: float = 600, require_patch: bool = True) -> None:
        if not isinstance(command, str) or not command.strip():
            raise TypeError("'command' must be a non-empty string")
        expected = json.loads(expected_output_json) if isinstance(expected_output_json, str) else expected_output_json
        if not isinstance(expected, dict) or not expected or \
                not all(isinstance(v, str) and v in test_output.STATUSES for v in expected.values()):
            raise TypeError(f"'expected_output_json' must map test ids to one of {', '.join(test_output.STATUSES)}")
        test_output.parse("", framework)  # an unknown framework fails at construction, not after the tests
        self.command, self.expected, self.framework = command, expected, framework
        self.repo_dir, self.base_commit = repo_dir, patch.check_commit(base_commit)
        self.exclude = patch.exclude_list(exclude_patterns)
        self.timeout, self.require_patch = positive_seconds(timeout_seconds), bool(require_patch)

    def evaluate(self, ctx: EvalContext) -> EvalResult:
        if ctx.runtime is None:
            raise EvaluationError("the test_on_output evaluator needs a runtime")
        meta: dict[str, Any] = {}
        if self.require_patch or ctx.agent_runtime is not None:
            verdict = patched_runtime(ctx, self.repo_dir, self.base_commit, self.exclude, meta)
            if verdict is not None:
                return verdict
        res = ctx.runtime.exec(self.command, cwd=self.repo_dir, env=ctx.env, timeout=ctx.budget(self.timeout),
                               log_name="tests")
        output = _whole_output(res)
        parsed = test_output.parse(output, self.framework)
        mismatches = test_output.compare(parsed, self.expected)
        # Every expected test passing while the run failed means something the map does not show
        # failed (collection, teardown, or PASSED lines printed by the code under test); a run
        # without its runner's totals was ended early (the code under test can print passes and
        # exit 0 before pytest or unittest report its failure).
        failed_run = all(v == "PASSED" for v in self.expected.values()) and res.exit_code != 0
        cut_short = not res.timed_out and not test_output.summarised(output, self.framework)
        meta.update(tests=parsed, mismatches={t: list(v) for t, v in mismatches.items()}, exit_code=res.exit_code,
                    timed_out=res.timed_out, **({"nonzero_exit": True} if failed_run else {}),
                    **({"no_runner_totals": True} if cut_short else {}))
        passed = not mismatches and not res.timed_out and not failed_run and not cut_short
        return EvalResult(1.0 if passed else 0.0, metadata=meta)


def _whole_output(res: Any) -> str:
    """The test run's whole stdout and stderr (from the log files; the result holds only tails)."""
    parts = []
    for stream in ("stdout", "stderr"):
        path = res.log_paths.get(stream)
        try:  # the session's folder: a link or a pipe it left in the log's place is not read
            parts.append(read_in(Path(path), WHOLE_OUTPUT_BYTES).decode("utf-8", "replace"))
        except (TypeError, OSError):
            parts.append(getattr(res, stream))
    return "\n".join(parts)
