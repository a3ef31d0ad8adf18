"""Fuzzed requests against the running proxy: anything a client sends gets an answer in its
provider's format, 2xx or 4xx, never a 5xx (the instant fake upstream answers valid ones)."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import running_session

PATHS = {"openai_chat": "/v1/chat/completions", "openai_responses": "/v1/responses",
         "anthropic": "/v1/messages", "google": "/v1beta/models/fake:generateContent"}
VALID = {
    "openai_chat": {"model": "fake", "messages": [{"role": "user", "content": "hi"}],
                    "tools": [{"type": "function", "function": {"name": "t", "parameters": {}}}]},
    "openai_responses": {"model": "fake", "input": [{"role": "user", "content": "hi"}],
                         "tools": [{"type": "function", "name": "t", "parameters": {}}]},
    "anthropic": {"model": "fake", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
                  "tools": [{"name": "t", "input_schema": {"type": "object"}}]},
    "google": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
               "tools": [{"functionDeclarations": [{"name": "t"}]}]},
}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=12)


def mutate(body, path, value):
    """Replace the value at a random path inside a valid request."""
    body = json.loads(json.dumps(body))
    node = body
    for key in path[:-1]:
        node = node[key] if isinstance(node, dict) else node[0]
    if isinstance(node, dict):
        node[path[-1]] = value
    return body


def paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(obj, list) and obj:
        yield from paths(obj[0], (*prefix, 0))


@pytest.fixture(scope="module")
def sid(fake_stack):
    return running_session(fake_stack.settings.redis_url)


def check(fake_stack, sid, provider, body):
    url = f"{fake_stack.settings.proxy_url}/s/{sid}{PATHS[provider]}"
    resp = httpx.post(url, content=json.dumps(body), headers={"content-type": "application/json"}, timeout=30)
    assert resp.status_code < 500, (provider, body, resp.text)
    data = resp.json()
    if resp.status_code >= 400:
        if provider == "anthropic":
            assert data["type"] == "error"
        else:
            assert isinstance(data["error"]["message"], str)


@pytest.mark.parametrize("provider", sorted(PATHS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_requests_never_5xx(fake_stack, sid, provider, data):
    valid = VALID[provider]
    where = data.draw(st.sampled_from([p for p in paths(valid) if p]))
    check(fake_stack, sid, provider, mutate(valid, where, data.draw(json_values)))


@pytest.mark.parametrize("provider", sorted(PATHS))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=json_values)
def test_arbitrary_json_never_5xx(fake_stack, sid, provider, body):
    check(fake_stack, sid, provider, body)
