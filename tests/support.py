"""Helpers shared by the test packages (no fixtures here; see conftest.py files)."""

from __future__ import annotations

import time

import redis

from pipeline.schemas import SessionSpec, TaskRequest
from pipeline.status import SessionStatus
from pipeline.stores.sessions import SessionStore


def running_session(redis_url: str, **task: object) -> str:
    """Register a session and walk it to RUNNING, as INIT and RUN would: the proxy then accepts
    its model calls. (The pipeline itself is exercised by tests/e2e.)"""
    payload = {"instruction": "x", "agent": {"custom_shell": "true"}, **task}
    spec = SessionSpec.expand(TaskRequest.model_validate(payload))[0]
    store = SessionStore(redis.Redis.from_url(redis_url))
    store.register(spec)
    for status in (SessionStatus.INITIALIZING, SessionStatus.READY, SessionStatus.RUNNING):
        store.transition(spec.session_id, status)
    return spec.session_id


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")
