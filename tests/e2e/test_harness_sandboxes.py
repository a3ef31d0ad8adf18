"""The harness CLIs in the sandboxed runtimes (docker with no network, bwrap with no network),
where test_harness_presets runs them locally or in a container with the host's network. A probe
ran all six in both (status, reward, ``polar verify``, chains, cleanup, transcripts kept: as in
their usual runtime); what it found broken is kept here, one session each."""

from __future__ import annotations

import pytest

from tests.conftest import TEST_IMAGE
from tests.e2e.test_harness_presets import ROOT, first_call_tells_the_skill, task_for

# The modules using presets_stack (six harness CLIs, six run slots) share one process: one stack.
pytestmark = pytest.mark.xdist_group("presets-stack")

SANDBOXES = {"docker-none": {"backend": "docker", "image": TEST_IMAGE, "allow_internet": False},
             "bwrap-none": {"backend": "bwrap", "allow_internet": False}}


@pytest.mark.parametrize(("preset", "sandbox", "skills_dir"), [
    # relative to the workdir: the links were made relative to the CLI's folder, dangling
    ("claude_code", "docker-none", "skills"),
    # a runtime path under /polar/session: no such folder in a bwrap sandbox (the session is a host folder there)
    ("codex", "bwrap-none", "/polar/session/workspace/skills"),
])
def test_a_skills_folder_the_task_uploads_reaches_the_cli_in_a_sandbox(preset, sandbox, skills_dir, presets_client,
                                                                       presets_stack, engine, request):
    """The task uploads its skills into the runtime and names them by a runtime path, as the
    README says: the CLI tells the model about them (the skill's description in its first call)."""
    if sandbox.startswith("docker") and engine is None:
        pytest.skip("podman is not installed")
    if sandbox.startswith("bwrap"):
        request.getfixturevalue("bwrap_available")
    task = task_for(preset, "local", settings={"skills_dir": skills_dir})
    task["runtime"].update(SANDBOXES[sandbox])
    task["runtime"]["prepare"].append({"type": "upload_dir", "src": str(ROOT / "tests" / "fixtures" / "skills"),
                                       "dst": "skills"})
    first_call_tells_the_skill(task, presets_client, presets_stack)
