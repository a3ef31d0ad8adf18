"""The plug-in catalogue (pipeline/plugins.py) is what the registries load and what payloads
may name: every entry imports and implements its seam; planned names fail clearly."""

from __future__ import annotations

import pytest

from pipeline import builders, plugins
from pipeline.errors import BuildError, EvaluationError, HarnessError, RuntimeBackendError
from pipeline.schemas import TaskRequest
from workers import evaluators, harnesses, runtimes

SEAMS = [
    (runtimes.BACKENDS, plugins.RUNTIMES, RuntimeBackendError, ("create", "attach")),
    (harnesses.HARNESSES, plugins.HARNESSES, HarnessError, ("setup", "command")),
    (evaluators.EVALUATORS, plugins.EVALUATORS, EvaluationError, ("evaluate",)),
    (builders.BUILDERS, plugins.BUILDERS, BuildError, ("build",)),
]


@pytest.mark.parametrize("registry, catalog, error, methods", SEAMS, ids=lambda v: getattr(v, "kind", None))
def test_every_catalogued_plugin_loads_and_implements_its_seam(registry, catalog, error, methods):
    assert registry.names() == sorted(catalog)
    for name in catalog:
        item = registry.resolve(name)
        assert all(callable(getattr(item, m, None)) for m in methods), (name, methods)
    with pytest.raises(error, match="not available in this build"):
        registry.resolve("no-such-plugin")
    with pytest.raises(error, match="not allowed"):
        registry.resolve("no.such.module:Thing")


def test_planned_names_are_accepted_at_submit_and_unavailable_at_run_time():
    task = TaskRequest.model_validate({"instruction": "x", "agent": {"harness": "codex"},
                                       "runtime": {"backend": "docker"}})
    assert task.agent.harness == "codex"
    with pytest.raises(HarnessError, match="not available"):
        harnesses.create("codex")
    with pytest.raises(RuntimeBackendError, match="not available"):
        runtimes.BACKENDS.resolve("docker")


def test_unknown_names_are_refused_at_submit():
    with pytest.raises(ValueError, match="unknown evaluator strategy 'vibes'"):
        TaskRequest.model_validate({"instruction": "x", "agent": {"custom_shell": "true"},
                                    "evaluator": {"strategy": "vibes"}})


def test_import_paths_load_only_from_allowed_modules():
    from pipeline.registry import allow_plugin_modules

    try:
        allow_plugin_modules([])
        with pytest.raises(BuildError, match="not allowed"):
            builders.BUILDERS.resolve("subprocess:Popen")
        allow_plugin_modules(["pipeline.builders"])
        assert builders.BUILDERS.resolve("pipeline.builders.per_request:PerRequestBuilder")
        with pytest.raises(BuildError, match="not allowed"):
            builders.BUILDERS.resolve("pipeline.buildersx:Thing")  # a prefix of a name is not the module
    finally:
        allow_plugin_modules([])
