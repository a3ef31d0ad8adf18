"""Helpers shared by the test packages (no fixtures here; see conftest.py files)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import redis

from pipeline.credentials import session_of_key
from pipeline.schemas import SessionSpec, TaskRequest
from pipeline.status import SessionStatus
from pipeline.stores.sessions import SessionStore


def running_session(redis_url: str, **task: object) -> str:
    """Register a session and walk it to RUNNING, as INIT and RUN would: the proxy then accepts
    its model calls. Returns the session's secret key (what its runtime would be given; the
    public id is ``sid_of(key)``). (The pipeline itself is exercised by tests/e2e.)"""
    payload = {"instruction": "x", "agent": {"custom_shell": "true"}, **task}
    spec = SessionSpec.expand(TaskRequest.model_validate(payload))[0]
    store = SessionStore(redis.Redis.from_url(redis_url))
    key = store.register(spec)
    for status in (SessionStatus.INITIALIZING, SessionStatus.READY, SessionStatus.RUNNING):
        store.transition(spec.session_id, status)
    return key


def sid_of(key: str) -> str:
    """The public session id of a session key."""
    sid = session_of_key(key)
    assert sid is not None, "not a session key"
    return sid


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


# --- calling the proxy through the vendors' SDKs (tests/inproc and tests/proxy) ---------------

MSG = [{"role": "user", "content": "hi"}]
KINDS = ["chat", "responses", "anthropic", "google"]  # one per provider API
PROVIDER_OF = {"chat": "openai_chat", "responses": "openai_responses", "anthropic": "anthropic", "google": "google"}
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages",
         "google": "/v1beta/models/fake:generateContent"}


def call(kind: str, c: dict, model: str, stream: bool = False):
    """One model call of API ``kind`` through the SDK clients ``c`` (openai, anthropic, google)."""
    if kind == "chat":
        if stream:
            return list(c["openai"].chat.completions.create(model=model, messages=MSG, stream=True))
        return c["openai"].chat.completions.create(model=model, messages=MSG)
    if kind == "responses":
        if stream:
            return list(c["openai"].responses.create(model=model, input="hi", stream=True))
        return c["openai"].responses.create(model=model, input="hi")
    if kind == "anthropic":
        if stream:
            with c["anthropic"].messages.stream(model=model, max_tokens=10, messages=MSG) as s:
                return s.get_final_message()
        return c["anthropic"].messages.create(model=model, max_tokens=10, messages=MSG)
    if stream:
        return list(c["google"].models.generate_content_stream(model=model, contents="hi"))
    return c["google"].models.generate_content(model=model, contents="hi")


def error_shape(kind: str, body: dict) -> bool:
    """Whether ``body`` is an error in the provider's own shape."""
    if kind == "anthropic":
        return body["type"] == "error" and isinstance(body["error"]["message"], str)
    if kind == "google":
        return isinstance(body["error"]["code"], int) and isinstance(body["error"]["status"], str)
    return isinstance(body["error"]["message"], str) and "type" in body["error"]


def records(redis_url: str, key: str) -> tuple[list[dict], list[dict]]:
    """The completion records and failed-call records of the session of ``key``, as dicts."""
    from pipeline.stores.records import RecordStore

    sid = sid_of(key)
    store = RecordStore(redis.Redis.from_url(redis_url), 3600)
    done, _ = store.completions(sid)
    return [r.model_dump() for r in done], [e.model_dump() for e in store.errors(sid)]


def metric_samples(text: str) -> dict[tuple[str, tuple], float]:
    """Prometheus text as {(sample name, sorted label pairs): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


REPORTS = ("chaos", "harness", "token_in", "swebench")  # the suites that print a table at the end of a run


def report_file(name: str) -> Path:
    """Where a suite writes its table's rows (tests/conftest.py prints them): POLAR_TEST_<NAME>_REPORT,
    set per test run to a folder of its own, so two runs on one machine do not mix or delete each
    other's rows (a POLAR_ name outside POLAR_TEST_ would also be refused by the stacks' settings)."""
    return Path(os.environ[f"POLAR_TEST_{name.upper()}_REPORT"])
