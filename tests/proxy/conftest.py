"""Proxy stacks: embedded Redis + an upstream + the proxy under gunicorn/gevent, as real
processes. Sessions are registered directly in RUNNING state (tests/support.py)."""

from __future__ import annotations

import pytest

from infra.stack import Stack, StackConfig
from pipeline.settings import Settings


@pytest.fixture(scope="session")
def fake_stack(tmp_path_factory):
    """The proxy in front of the instant fake upstream (faults chosen by model name)."""
    settings = Settings(home=tmp_path_factory.mktemp("fake-home"), stream_keepalive_seconds=0.3,
                        upstream_timeout_seconds=3, max_request_bytes=1_000_000)
    with Stack(StackConfig(settings=settings, upstream="fake", components=("proxy",))) as stack:
        yield stack
