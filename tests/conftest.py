"""Shared fixtures: a real (embedded) Redis, and the full stack for end-to-end tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter

import pytest
import redis

from infra.embedded_redis import EmbeddedRedis
from tests.support import REPORTS, report_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def redis_url():
    with EmbeddedRedis() as server:
        yield server.url


@pytest.fixture
def r(redis_url):
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """The tiny offline model, built once per test session."""
    from infra.refserver import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


def pytest_collection_modifyitems(items):
    """Each test's id is unique: xdist keys tests by id, and of two with one id runs one, silently."""
    counts = Counter(item.nodeid for item in items)
    if repeated := sorted(nodeid for nodeid, n in counts.items() if n > 1):
        raise pytest.UsageError(f"tests with the same id (xdist would run one of each): {repeated}")


def pytest_xdist_make_scheduler(config, log):
    """``make test``'s ``-n N --dist loadgroup``: a module's tests run in one process (its module
    fixtures start once), and so do all the modules of one ``xdist_group``: those sharing a session
    fixture too costly to start in each process, such as the stack with the six harness CLIs.
    (xdist's own loadgroup sends every ungrouped test anywhere.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ModuleOrGroup(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.rfind("@") > nodeid.rfind("]"):
                return nodeid.rsplit("@", 1)[-1]
            return nodeid.split("::", 1)[0]

    return ModuleOrGroup(config, log)


def pytest_configure(config):
    """Each run's report files in a folder of its own (the xdist workers, started after this, inherit
    the variables): two runs on one machine -- CI and a developer's -- do not share rows."""
    if hasattr(config, "workerinput"):
        return
    folder = tempfile.mkdtemp(prefix="polar-test-reports-")
    config._polar_reports = folder
    for name in REPORTS:
        os.environ.setdefault(f"POLAR_TEST_{name.upper()}_REPORT", os.path.join(folder, f"{name}.jsonl"))


def pytest_unconfigure(config):
    folder = getattr(config, "_polar_reports", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The tables the chaos suite (tests/chaos), the harness presets and swebench_harness (tests/e2e) write,
    when they ran."""
    _table(terminalreporter, config, "chaos", "chaos report", [
        "fault", "mid_stage", "submitted", "completed", "errored", "duplicates", "leaked_runtimes",
        "component_back_s", "task_done_after_fault_s", "callback_delivered_after_fault_s"], "tests/chaos")
    _table(terminalreporter, config, "harness", "harness presets", [
        "harness", "version", "provider_api", "streamed", "runtime", "completions", "chains", "drifted_turns",
        "verified", "agent_s"], "tests/e2e")
    _table(terminalreporter, config, "token_in", "token-in harnesses", [
        "harness", "token_in", "completions", "chains", "drifted_turns", "spliced_calls", "strict_updates",
        "strict_tokens", "verify_fail_on_drift"], "tests/e2e")
    _table(terminalreporter, config, "swebench", "swebench_harness", [
        "scenario", "instance", "refresh_runtime", "reward", "resolved", "grading_s", "extract_s", "apply_s", "tests_s"],
        "tests/e2e")


def _table(terminalreporter, config, name: str, title: str, cols: list[str], tier: str) -> None:
    import json

    report = report_file(name)
    if not report.exists() or not any(str(a).startswith(tier) or a == "tests" for a in config.args):
        return
    rows = [json.loads(line) for line in report.read_text().splitlines() if line.strip()]
    if not rows:
        return
    terminalreporter.section(title)
    terminalreporter.write_line(" | ".join(cols))
    for row in rows:
        terminalreporter.write_line(" | ".join(str(row.get(c)) for c in cols))


TEST_IMAGE = os.environ.get("POLAR_TEST_IMAGE", "localhost/polar-test:bookworm")


def _require_tool(name: str) -> None:
    import shutil

    if shutil.which(name) is None:
        if os.environ.get("POLAR_TEST_REQUIRE_RUNTIMES"):
            pytest.fail(f"{name} is required here (POLAR_TEST_REQUIRE_RUNTIMES) but not installed")
        pytest.skip(f"{name} is not installed")


@pytest.fixture(scope="session")
def bwrap_available():
    """The bwrap backend's tests need bubblewrap (skipped without, unless POLAR_TEST_REQUIRE_RUNTIMES)."""
    _require_tool("bwrap")


@pytest.fixture(scope="session")
def docker_host(tmp_path_factory):
    """podman's Docker-compatible API service, started for the test session (the docker runtime's
    engine in tests). Builds the test image once if this host lacks it. Without podman the
    docker tests are skipped -- unless POLAR_TEST_REQUIRE_RUNTIMES is set (CI), where that is a failure."""
    import subprocess
    import time
    from pathlib import Path

    _require_tool("podman")
    root = Path(__file__).resolve().parents[1]
    if subprocess.run(["podman", "image", "exists", TEST_IMAGE]).returncode != 0:
        subprocess.run([str(root / "infra" / "images" / "build_test_image.sh")], check=True)
    sock = tmp_path_factory.mktemp("podman") / "podman.sock"
    # cwd: conmon leaves files in its working directory (an empty "oom" after a container's
    # OOM kill), which was the checkout's
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{sock}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=sock.parent)
    deadline = time.monotonic() + 30
    while not sock.exists():
        if time.monotonic() > deadline or service.poll() is not None:
            service.kill()
            pytest.fail("podman system service did not start")
        time.sleep(0.05)
    yield f"unix://{sock}"
    service.terminate()
    service.wait(timeout=30)


@pytest.fixture(scope="session")
def engine(request):
    """podman's Docker API for the docker runtime's end-to-end and chaos tests; None where podman is absent
    (those tests skip, the rest of the suite runs)."""
    try:
        return request.getfixturevalue("docker_host")
    except pytest.skip.Exception:
        return None
