"""Fuzzed requests against the proxy app: anything a client sends gets an answer in its
provider's format, 2xx or 4xx, never a 5xx (the instant fake engine answers valid ones). In
process, so hypothesis can afford many more examples than over HTTP."""

from __future__ import annotations

import json

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


@pytest.fixture
def client(proxy_app):
    return proxy_app.test_client()


@pytest.fixture
def key(proxy_app, redis_url):
    return running_session(redis_url)


def check(client, key, provider, body):
    resp = client.post(f"/s/{key}{PATHS[provider]}", data=json.dumps(body), content_type="application/json")
    assert resp.status_code < 500, (provider, body, resp.get_data(as_text=True))
    data = resp.get_json()
    if resp.status_code >= 400:
        if provider == "anthropic":
            assert data["type"] == "error"
        else:
            assert isinstance(data["error"]["message"], str)


@pytest.mark.parametrize("provider", sorted(PATHS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_requests_never_5xx(client, key, provider, data):
    valid = VALID[provider]
    where = data.draw(st.sampled_from([p for p in paths(valid) if p]))
    check(client, key, provider, mutate(valid, where, data.draw(json_values)))


@pytest.mark.parametrize("provider", sorted(PATHS))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=json_values)
def test_arbitrary_json_never_5xx(client, key, provider, body):
    check(client, key, provider, body)
