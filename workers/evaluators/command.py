"""``command``: run a command in the session's runtime; the reward comes from its exit status.

Config: ``command`` (required), ``timeout_seconds`` (default 600), ``cwd``, ``env``,
``pass_reward`` / ``fail_reward`` (default 1.0 / 0.0), ``success_exit_codes`` (default [0]).
A command that runs out of time or crashes earns ``fail_reward``; one killed from outside (SIGKILL,
SIGTERM, SIGHUP, SIGINT) earns nothing (an evaluation error: the session is an ERROR, not a failed
sample).
"""

from __future__ import annotations

import signal
from typing import Any

from pipeline.errors import EvaluationError
from workers.evaluators.base import EvalContext, EvalResult

STOPPED_FROM_OUTSIDE = {signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGINT}


class CommandEvaluator:
    name = "command"

    def __init__(self, command: str, timeout_seconds: float = 600, cwd: str | None = None,
                 env: dict[str, str] | None = None, pass_reward: float = 1.0,
                 fail_reward: float = 0.0, success_exit_codes: list[int] | None = None) -> None:
        if not isinstance(command, str) or not command.strip():
            raise TypeError("'command' must be a non-empty string")
        self.command, self.timeout, self.cwd = command, float(timeout_seconds), cwd
        self.env = dict(env or {})
        self.pass_reward, self.fail_reward = float(pass_reward), float(fail_reward)
        self.success = set(success_exit_codes or [0])

    def evaluate(self, ctx: EvalContext) -> EvalResult:
        if ctx.runtime is None:
            raise EvaluationError("the command evaluator needs the session's runtime")
        res = ctx.runtime.exec(self.command, cwd=self.cwd, env={**ctx.env, **self.env},
                               timeout=ctx.budget(self.timeout), log_name="evaluate")
        if res.exit_code is not None and -res.exit_code in STOPPED_FROM_OUTSIDE and not res.timed_out:
            # Stopped by someone else (a teardown, an operator, the OOM killer): no grade at all,
            # not a failed one. (A crash of its own -- SIGSEGV, SIGABRT -- is a failed grade.)
            raise EvaluationError(f"the evaluation command was killed by signal {-res.exit_code}")
        passed = res.exit_code in self.success
        meta: dict[str, Any] = {"exit_code": res.exit_code, "timed_out": res.timed_out,
                                "stdout_tail": res.stdout[-2000:], "stderr_tail": res.stderr[-2000:]}
        return EvalResult(self.pass_reward if passed else self.fail_reward, metadata=meta)
