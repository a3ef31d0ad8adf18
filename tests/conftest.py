"""Shared fixtures: a real (embedded) Redis, and the full stack for end-to-end tests."""

from __future__ import annotations

import os

import pytest
import redis

from infra.embedded_redis import EmbeddedRedis

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


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The chaos suite's table (tests/chaos), when it ran."""
    import json
    import os
    from pathlib import Path

    report = Path(os.environ.get("POLAR_CHAOS_REPORT", "/tmp/polar-chaos-report.jsonl"))
    if not report.exists() or not any(str(a).startswith("tests/chaos") or a == "tests" for a in config.args):
        return
    rows = [json.loads(line) for line in report.read_text().splitlines() if line.strip()]
    if not rows:
        return
    cols = ["fault", "mid_stage", "submitted", "completed", "errored", "duplicates", "leaked_runtimes",
            "component_back_s", "task_done_after_fault_s", "callback_delivered_after_fault_s"]
    terminalreporter.section("chaos report")
    terminalreporter.write_line(" | ".join(cols))
    for row in rows:
        terminalreporter.write_line(" | ".join(str(row.get(c)) for c in cols))
