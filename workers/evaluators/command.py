"""``command``: run a command in the session's runtime; the reward comes from its exit status.

Config: ``command`` (required), ``timeout_seconds`` (default 600), ``cwd``, ``env``,
``pass_reward`` / ``fail_reward`` (default 1.0 / 0.0), ``success_exit_codes`` (default [0]).
A command that runs out of time, crashes or is killed earns ``fail_reward``; one whose runtime is
torn down under it earns nothing (an evaluation error: the session is an ERROR, not a failed sample).
"""

from __future__ import annotations

from typing import Any

from pipeline.errors import EvaluationError
from workers.evaluators.base import EvalContext, EvalResult, positive_seconds


class CommandEvaluator:
    name = "command"

    def __init__(self, command: str, timeout_seconds: float = 600, cwd: str | None = None,
                 env: dict[str, str] | None = None, pass_reward: float = 1.0,
                 fail_reward: float = 0.0, success_exit_codes: list[int] | None = None) -> None:
        if not isinstance(command, str) or not command.strip():
            raise TypeError("'command' must be a non-empty string")
        self.command, self.timeout, self.cwd = command, positive_seconds(timeout_seconds), cwd
        self.env = dict(env or {})
        self.pass_reward, self.fail_reward = float(pass_reward), float(fail_reward)
        if success_exit_codes is not None and (not isinstance(success_exit_codes, list) or not success_exit_codes or
                                               not all(type(c) is int for c in success_exit_codes)):
            raise TypeError("'success_exit_codes' must be a non-empty list of exit codes")
        self.success = set(success_exit_codes or [0])

    def evaluate(self, ctx: EvalContext) -> EvalResult:
        if ctx.runtime is None:
            raise EvaluationError("the command evaluator needs the session's runtime")
        res = ctx.runtime.exec(self.command, cwd=self.cwd, env={**ctx.env, **self.env},
                               timeout=ctx.budget(self.timeout), log_name="evaluate")
        if res.cancelled:
            # The runtime was torn down under it: no grade at all, not a failed one. (Any signal
            # or exit status is a grade: code under test that kills its grader earns fail_reward,
            # never an ERROR a trainer would skip.)
            raise EvaluationError("the evaluation command was stopped: its runtime was torn down")
        passed = res.exit_code in self.success
        meta: dict[str, Any] = {"exit_code": res.exit_code, "timed_out": res.timed_out,
                                "stdout_tail": res.stdout[-2000:], "stderr_tail": res.stderr[-2000:]}
        return EvalResult(self.pass_reward if passed else self.fail_reward, metadata=meta)
