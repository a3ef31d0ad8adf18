"""A task's builder and evaluator configs, checked at submit by building them: a config no
builder or grader can honour is a 400 now, not an ERROR after every session's agent has run.

Only the project's own strategies are built here (a plug-in's module is the workers' to load).
Their constructors are pure (they read their config and nothing else), so building one costs
nothing and starts nothing. An evaluator whose optional package is not installed in this
process (``swebench``) is left to the workers, which may have it.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from pipeline import plugins
from pipeline.errors import PolarError
from pipeline.registry import Registry
from pipeline.schemas import TaskRequest

OPTIONAL_PACKAGES = {"swebench_harness": "swebench"}
_EVALUATORS: Registry[Any] = Registry.from_catalog("evaluator", PolarError, plugins.EVALUATORS)
_BUILDERS: Registry[Any] = Registry.from_catalog("builder", PolarError, plugins.BUILDERS)


def config_problems(task: TaskRequest) -> list[dict[str, Any]]:
    problems = []
    for field, registry, catalog, strategy, config in (
            ("builder.config", _BUILDERS, plugins.BUILDERS, task.builder.strategy, task.builder.config),
            ("evaluator.config", _EVALUATORS, plugins.EVALUATORS, task.evaluator.strategy, task.evaluator.config)):
        if strategy not in catalog:
            continue
        package = OPTIONAL_PACKAGES.get(strategy)
        if package and importlib.util.find_spec(package) is None:
            continue
        try:
            registry.build(strategy, config)
        except (PolarError, TypeError, ValueError, KeyError) as exc:
            problems.append({"field": field, "message": f"{strategy}: {exc}"})
    return problems
