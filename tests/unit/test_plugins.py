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


def test_an_implemented_evaluator_refuses_a_bad_config_by_name():
    with pytest.raises(EvaluationError, match="bad config for evaluator 'swebench_harness'.*eval_script"):
        evaluators.create("swebench_harness", {"instance": {"instance_id": "a__b-1", "base_commit": "abc",
                                                            "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"}})


@pytest.mark.parametrize("runtime, field", [
    ({"backend": "local", "image": "debian"}, "image"),
    ({"backend": "local", "allow_internet": False}, "allow_internet"),
    ({"backend": "local", "cpus": 2}, "cpus"),
    ({"backend": "bwrap", "memory_mb": 512}, "memory_mb"),
    ({"backend": "docker", "kwargs": {"volumes": {"/": "/host"}}}, "kwargs"),
    ({"backend": "docker"}, "needs an image"),
    ({"backend": "local", "workdir": "/etc"}, "/polar/session"),
    ({"backend": "docker", "image": "x", "prepare": [{"type": "upload_file", "source": "/a", "target": "../../x"}]},
     "'..'"),
])
def test_a_field_the_backend_cannot_honour_is_refused_at_submit(runtime, field):
    with pytest.raises(ValueError, match=field):
        TaskRequest.model_validate({"instruction": "x", "agent": {"custom_shell": "true"}, "runtime": runtime})


def test_polar_payload_fields_are_accepted():
    task = TaskRequest.model_validate({"instruction": "x", "agent": {"custom_shell": "true"}, "runtime": {
        "backend": "docker", "image": "img", "network": "none", "allow_internet": False, "cpus": 1, "memory_mb": 256,
        "storage_mb": 1024, "gpus": 0, "prepare": [
            {"type": "upload_dir", "source": "/data/repo", "target": "/testbed"},
            {"type": "exec", "command": "pip install -e .", "max_attempts": 3, "retry_backoff_seconds": 2}]}})
    up, ex = task.runtime.prepare
    assert (up.src, up.dst) == ("/data/repo", "/testbed") and (ex.max_attempts, ex.retry_backoff_seconds) == (3, 2)
    assert TaskRequest.model_validate({"instruction": "x", "agent": {"custom_shell": "true"},
                                       "runtime": None}).runtime.backend is None  # the service's default


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
