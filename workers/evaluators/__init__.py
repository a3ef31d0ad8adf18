"""Evaluators and their registry: ``session_completed``, ``command``, or an import path."""

from __future__ import annotations

from typing import Any

from pipeline.registry import Registry
from workers.evaluators.base import EvalContext, EvalResult, EvaluationError, Evaluator
from workers.evaluators.command import CommandEvaluator
from workers.evaluators.session_completed import SessionCompletedEvaluator

REGISTRY: Registry[Any] = Registry("evaluator", EvaluationError)
for _cls in (SessionCompletedEvaluator, CommandEvaluator):
    REGISTRY.register(_cls.name, _cls)


def create(strategy: str, config: dict[str, Any] | None = None) -> Evaluator:
    return REGISTRY.build(strategy, config)


__all__ = ["REGISTRY", "EvalContext", "EvalResult", "EvaluationError", "Evaluator", "create"]
