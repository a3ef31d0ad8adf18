"""Evaluators and their registry: ``session_completed``, ``command``, or an import path."""

from __future__ import annotations

from typing import Any

from pipeline import plugins
from pipeline.errors import EvaluationError
from pipeline.registry import Registry
from workers.evaluators.base import EvalContext, EvalResult, Evaluator

# Adding an evaluator: write its module (see ``base.Evaluator``), add one line to pipeline/plugins.py.
EVALUATORS: Registry[type[Evaluator]] = Registry.from_catalog("evaluator", EvaluationError, plugins.EVALUATORS)


def create(strategy: str, config: dict[str, Any] | None = None) -> Evaluator:
    evaluator: Evaluator = EVALUATORS.build(strategy, config)
    return evaluator


__all__ = ["EVALUATORS", "EvalContext", "EvalResult", "EvaluationError", "Evaluator", "create"]
