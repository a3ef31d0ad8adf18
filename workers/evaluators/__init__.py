"""Evaluators and their registry: ``session_completed``, ``command``, or an import path."""

from __future__ import annotations

from typing import Any

from pipeline.errors import EvaluationError
from pipeline.registry import Registry
from workers.evaluators.base import EvalContext, EvalResult, Evaluator
from workers.evaluators.command import CommandEvaluator
from workers.evaluators.session_completed import SessionCompletedEvaluator

# Adding an evaluator: write its module (see ``base.Evaluator``), add one line below.
EVALUATORS: Registry[type[Evaluator]] = Registry("evaluator", EvaluationError)
EVALUATORS.register("session_completed", SessionCompletedEvaluator)
EVALUATORS.register("command", CommandEvaluator)


def create(strategy: str, config: dict[str, Any] | None = None) -> Evaluator:
    evaluator: Evaluator = EVALUATORS.build(strategy, config)
    return evaluator


__all__ = ["EVALUATORS", "EvalContext", "EvalResult", "EvaluationError", "Evaluator", "create"]
