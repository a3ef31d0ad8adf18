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
