"""The compose recipe brought up for real (``infra/compose/smoke.sh``): the images built from
the local test image (no registry), Redis with AOF, the API, two proxies behind HAProxy, one
worker service per stage, Flower and the reference model on a podman network with free host
ports; the demo task's four sessions run through it, the API refuses a call without its token,
HAProxy spreads the model calls over both proxies, and everything is torn down after."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TEST_IMAGE, _require_tool

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "infra" / "compose" / "smoke.sh"
IMAGE_SOURCES = ("pyproject.toml", "README.md", "pipeline", "workers", "proxy", "infra", "examples")
IMAGE_REPO = "localhost/polar"


def source_tag() -> str:
    """The project image's tag for this source tree: the stack under test is this code, never an
    image left by an earlier run of other code."""
    digest = hashlib.sha256()
    for name in IMAGE_SOURCES:
        path = ROOT / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()
                                                     and "__pycache__" not in p.parts)
        for f in files:
            digest.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    return f"src-{digest.hexdigest()[:16]}"


def remove_older_builds(keep: str) -> None:
    """Earlier source trees' images (a GB each, torch included) are not kept. Called after the
    build: the new image shares their dependency layer (the Containerfile's first RUN), which
    removing them first would have removed with them."""
    listed = subprocess.run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}", IMAGE_REPO],
                            capture_output=True, text=True).stdout.split()
    old = [ref for ref in listed if ref.split(":")[-1].startswith("src-") and ref != keep]
    if old:
        subprocess.run(["podman", "rmi", "-f", *old], capture_output=True)


def test_the_compose_stack_runs_the_demo_task_behind_two_proxies():
    _require_tool("podman")
    compose = shutil.which("podman-compose") or str(Path(sys.executable).parent / "podman-compose")
    if subprocess.run(["podman", "image", "exists", TEST_IMAGE]).returncode != 0:
        if os.environ.get("POLAR_TEST_REQUIRE_RUNTIMES"):
            pytest.fail(f"{TEST_IMAGE} is required here (infra/images/build_test_image.sh)")
        pytest.skip(f"{TEST_IMAGE} is not built (infra/images/build_test_image.sh)")
    image = f"{IMAGE_REPO}:{source_tag()}"
    env = {**os.environ, "COMPOSE_BIN": compose, "BASE_IMAGE": TEST_IMAGE, "STACK_IMAGE": image}
    try:
        proc = subprocess.run(["bash", str(SMOKE)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    finally:
        remove_older_builds(image)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    done = re.search(r"(\d+)/(\d+) sessions COMPLETED with reward 1", out)
    assert done and done.group(1) == done.group(2) == "4", out[-3000:]
    replicas = re.search(r"proxy replicas: (\d+); requests per replica through HAProxy:(.*)", out)
    assert replicas and int(replicas.group(1)) == 2, out[-3000:]
    served = [int(n) for n in re.findall(r"(\d+) proxies/proxy\d+", replicas.group(2))]
    assert len(served) == 2 and min(served) > 0, replicas.group(0)
    print(out[-800:])
