"""``agent.settings.version``: INIT runs the CLI's ``--version`` in the session's runtime and
goes on only when it names the pinned version -- for each of the six CLIs from the tools folder,
pinned at what ``polar harnesses install`` put there."""

from __future__ import annotations

import os

import pytest

from infra.harness_tools import HARNESS_CLIS, installed_versions
from pipeline.errors import HarnessError
from pipeline.schemas import SessionSpec, TaskRequest
from tests.e2e.conftest import TOOLS
from workers import runtimes
from workers.harnesses import HarnessContext, create
from workers.runtimes import RuntimeHost


@pytest.fixture(scope="module")
def tools():
    """The six CLIs at their pinned versions (``polar harnesses install``), as the e2e tests find them."""
    have = installed_versions(TOOLS)
    if missing := [n for n, (_, version, _) in HARNESS_CLIS.items() if have[n] != version]:
        message = f"harness CLIs {missing} not in {TOOLS} (polar harnesses install, POLAR_TOOLS_DIR={TOOLS})"
        if os.environ.get("POLAR_TEST_REQUIRE_RUNTIMES"):
            pytest.fail(message)
        pytest.skip(message)
    return TOOLS


def setup_pinned(tmp_path, tools, preset: str, version: str) -> None:
    task = TaskRequest.model_validate({"instruction": "say DONE", "agent": {
        "harness": preset, "model_name": "m", "settings": {"version": version}}})
    spec = SessionSpec.expand(task)[0]
    runtime = runtimes.create(spec.runtime, spec.session_id, RuntimeHost(root=tmp_path, tools_dir=tools))
    runtime.start()
    try:
        create(preset).setup(runtime, HarnessContext(spec, {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}))
    finally:
        runtime.stop()


@pytest.mark.parametrize("preset", sorted(HARNESS_CLIS))
def test_the_installed_version_passes_the_pin(preset, tmp_path, tools):
    # pi prints its version on stderr: the pin failed with "the runtime has ''"
    setup_pinned(tmp_path, tools, preset, installed_versions(tools)[preset])


def test_another_version_fails_naming_what_the_runtime_has(tmp_path, tools):
    with pytest.raises(HarnessError, match=r"the task wants pi 0\.0\.1, the runtime has '[^']*\d") as err:
        setup_pinned(tmp_path, tools, "pi", "0.0.1")
    assert installed_versions(tools)["pi"] in str(err.value)
