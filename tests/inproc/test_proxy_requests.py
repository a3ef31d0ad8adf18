"""Requests the SDKs can send that the proxy does not serve, or serves only in part: each one is
answered in the caller's own format and with what it asked for, never quietly dropped.
(Found by probing the proxy with SDK calls no fixture made.)"""

from __future__ import annotations

import json

import openai
import pytest

from tests.inproc.conftest import sdk_clients
from tests.support import MSG, PATHS, error_shape, records, running_session

ANTHROPIC = {"anthropic-version": "2023-06-01"}


@pytest.mark.parametrize("method, path, headers, kind", [
    ("POST", "/v1beta/models/fake:embedContent", {}, "google"),
    ("POST", "/v1/models/fake:batchEmbedContents", {}, "google"),
    ("GET", "/v1beta/files", {}, "google"),
    ("POST", "/v1beta/cachedContents", {}, "google"),
    ("GET", "/v1beta/models/fake:generateContent", {}, "google"),  # a generate call is a POST
    ("GET", "/v1/files", {"x-goog-api-key": "k"}, "google"),
    ("POST", "/v1/messages/batches", {}, "anthropic"),
    ("POST", "/v1/complete", {}, "anthropic"),
    ("GET", "/v1/messages", ANTHROPIC, "anthropic"),
    ("DELETE", "/v1/messages", ANTHROPIC, "anthropic"),
    ("POST", "/v1/responses/compact", {}, "responses"),
    ("POST", "/v1/embeddings", {}, "chat"),
    ("GET", "/v1/files", {}, "chat"),
])
@pytest.mark.parametrize("body", [None, b"{}"])
def test_an_unserved_endpoint_is_a_404_in_its_apis_format(proxy_app, redis_url, method, path, headers, kind, body):
    key = running_session(redis_url)
    resp = proxy_app.test_client().open(f"/s/{key}{path}", method=method, data=body, headers=headers,
                                        content_type="application/json")
    assert resp.status_code == 404, resp.get_data(as_text=True)  # not "malformed JSON body" for an empty one
    assert error_shape(kind, resp.get_json()), resp.get_json()
    assert "not served" in resp.get_data(as_text=True)


def test_the_sdks_unserved_calls_raise_their_own_not_found(proxy_app, redis_url):
    key = running_session(redis_url)
    c = sdk_clients(proxy_app, key)
    with pytest.raises(openai.NotFoundError):
        c["openai"].responses.cancel("resp_x")  # served, but no such response
    with pytest.raises(Exception) as info:
        c["google"].models.embed_content(model="fake", contents="hi")
    assert getattr(info.value, "code", None) == 404 and info.value.status == "NOT_FOUND"


def _post(app, key: str, kind: str, body: dict, path: str | None = None):
    return app.test_client().post(f"/s/{key}{path or PATHS[kind]}", json=body,
                                  headers=ANTHROPIC if kind == "anthropic" else {})


@pytest.mark.parametrize("kind, body, param", [
    ("google", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "object"}}]}],
                "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["nope"]}}},
     "allowedFunctionNames"),
    ("google", {"contents": [{"role": "user", "parts": []}]}, None),
    ("anthropic", {"model": "fake", "max_tokens": 5, "messages": [{"role": "user", "content": []}]}, None),
    ("anthropic", {"model": "fake", "max_tokens": 5, "messages": MSG, "stream": "yes"}, "stream"),
    ("responses", {"model": "fake", "input": "hi", "stream": "yes"}, "stream"),
    ("responses", {"model": "fake", "input": "hi", "background": True}, "background"),
    ("responses", {"model": "fake", "input": "hi", "conversation": "conv_x"}, "conversation"),
    ("responses", {"model": "fake", "input": "hi", "text": {"format": {"type": "yaml"}}}, "text.format"),
    # asked for, and once dropped without a word (the caller got something else than it asked for)
    ("responses", {"model": "fake", "input": "hi", "max_tool_calls": 1}, "max_tool_calls"),
    ("chat", {"model": "fake", "messages": MSG, "modalities": ["text", "audio"],
                "audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ("chat", {"model": "fake", "messages": MSG, "web_search_options": {}}, "web_search_options"),
    ("chat", {"model": "fake", "messages": [*MSG, {"role": "assistant", "content": None,
                                                     "function_call": {"name": "f", "arguments": "{}"}},
                                              {"role": "user", "content": "go on"}]}, "messages[1].function_call"),
    ("google", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                "generationConfig": {"responseMimeType": "text/x.enum",
                                     "responseSchema": {"type": "STRING", "enum": ["a", "b"]}}}, "responseMimeType"),
    ("anthropic", {"model": "fake", "max_tokens": 5, "messages": MSG,
                   "mcp_servers": [{"type": "url", "url": "https://mcp.example", "name": "x"}]}, "mcp_servers"),
])
def test_a_request_that_cannot_be_served_as_asked_is_a_400_in_its_format(proxy_app, redis_url, kind, body, param):
    key = running_session(redis_url)
    resp = _post(proxy_app, key, kind, body, "/v1beta/models/fake:generateContent" if kind == "google" else None)
    text = resp.get_data(as_text=True)
    assert resp.status_code == 400 and error_shape(kind, resp.get_json()), text
    assert param is None or param in text
    assert "must be a non-empty list" not in text  # refused here, not by the engine
    done, errors = records(redis_url, key)
    assert done == [] and len(errors) == 1  # kept for diagnosis, never a completion


def test_a_negative_gemini_seed_is_taken_as_gemini_takes_it(proxy_app, redis_url):
    key = running_session(redis_url)
    resp = _post(proxy_app, key, "google", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                                            "generationConfig": {"seed": -5}}, "/v1beta/models/fake:generateContent")
    assert resp.status_code == 200, resp.get_data(as_text=True)
    (record,), _ = records(redis_url, key)
    assert record["normalized_request"]["seed"] == -5


@pytest.mark.parametrize("fmt, sent", [
    ({"type": "json_object"}, {"type": "json_object"}),
    ({"type": "json_schema", "name": "r", "schema": {"type": "object"}},
     {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}),
    ({"type": "text"}, None),
])
def test_responses_text_format_reaches_the_engine_and_is_echoed(proxy_app, redis_url, fmt, sent):
    key = running_session(redis_url)
    resp = _post(proxy_app, key, "responses", {"model": "fake", "input": "hi", "text": {"format": fmt}})
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert resp.get_json()["text"] == {"format": fmt}
    (record,), _ = records(redis_url, key)
    assert record["normalized_request"].get("response_format") == sent


def test_a_streamed_chat_answer_carries_the_engines_id_as_the_plain_one_does(proxy_app, redis_url):
    key = running_session(redis_url)
    c = sdk_clients(proxy_app, key)["openai"]
    plain = c.chat.completions.create(model="fake", messages=MSG)
    chunks = list(c.chat.completions.create(model="fake", messages=MSG, stream=True))
    done, _ = records(redis_url, key)
    assert plain.id == done[0]["upstream_response"]["id"]
    assert {ch.id for ch in chunks} == {done[1]["upstream_response"]["id"]}, json.dumps([ch.id for ch in chunks])
