"""What the vendors refuse with a 400, refused by the conversions too (no I/O); and what a
field means to the prompt, carried into it."""

from __future__ import annotations

import pytest

from proxy.errors import BadRequest, UnsupportedFeature
from proxy.providers import PROVIDERS
from proxy.providers.tool_errors import TOOL_ERROR

A = PROVIDERS["anthropic"]


def anthropic_body(**extra):
    return {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], **extra}


def test_anthropic_stop_sequences_must_be_a_list():
    with pytest.raises(BadRequest) as info:
        A.parse(anthropic_body(stop_sequences="END"))
    assert info.value.param == "stop_sequences"
    assert A.parse(anthropic_body(stop_sequences=["END"])).chat["stop"] == ["END"]


def tool_round(result: dict) -> list[dict]:
    return [{"role": "user", "content": "ls"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", **result}]}]


@pytest.mark.parametrize("result, text", [
    ({"content": "boom", "is_error": True}, f"{TOOL_ERROR}\nboom"),
    ({"content": [{"type": "text", "text": "boom"}], "is_error": True}, f"{TOOL_ERROR}\nboom"),
    ({"is_error": True}, TOOL_ERROR),
    ({"content": "fine", "is_error": False}, "fine"),
    ({"content": "fine"}, "fine"),
])
def test_an_anthropic_tool_error_is_marked_in_the_tool_message(result, text):
    chat = A.parse(anthropic_body(messages=tool_round(result))).chat
    assert chat["messages"][-1] == {"role": "tool", "tool_call_id": "t1", "content": text}


def test_an_anthropic_is_error_must_be_a_boolean():
    with pytest.raises(BadRequest) as info:
        A.parse(anthropic_body(messages=tool_round({"content": "x", "is_error": "yes"})))
    assert info.value.param == "messages.2.content.0.is_error"


G = PROVIDERS["google"]


@pytest.mark.parametrize("config", [{"topk": 3}, {"maxOutputTokens": 5, "max_tokens": 5}, {"thinking": {}}])
def test_an_unknown_generation_config_field_is_googles_400(config):
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": config}
    with pytest.raises(BadRequest) as info:
        G.parse(body, path_model="m")
    assert info.value.message.startswith("Invalid JSON payload received. Unknown name ")
    assert G.error(info.value)["error"]["status"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize("response, text", [
    ({"error": "no such file"}, f"{TOOL_ERROR}\nno such file"),
    ({"error": {"code": 2}}, f'{TOOL_ERROR}\n{{"code": 2}}'),
    ({"output": "3 files"}, "3 files"),
    ({"output": "partial", "error": "timed out"}, "partial"),
    ({"files": 3}, '{"files": 3}'),
])
def test_a_gemini_function_response_with_an_error_is_marked_in_the_tool_message(response, text):
    body = {"contents": [{"role": "user", "parts": [{"text": "ls"}]},
                         {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]},
                         {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": response}}]}]}
    assert G.parse(body, path_model="m").chat["messages"][-1]["content"] == text


@pytest.mark.parametrize("response", [{"name": "ls"}, {"name": "ls", "id": "c9"}, {"name": "cat", "id": "c1"}])
def test_a_gemini_function_response_answering_no_call_is_googles_400(response):
    called = {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}, "id": "c1"}}]}
    answer = {"role": "user", "parts": [{"functionResponse": {**response, "response": {"output": "x"}}}]}
    for history in ([], [called, answer]):  # no call at all; the one call answered already
        with pytest.raises(BadRequest, match="function response turn comes immediately after a function call"):
            G.parse({"contents": [{"role": "user", "parts": [{"text": "ls"}]}, *history, answer]}, path_model="m")


def test_generation_config_fields_in_either_spelling_pass():
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "generation_config": {"max_output_tokens": 5, "top_k": 2, "thinking_config": {"include_thoughts": True},
                                  "response_mime_type": "application/json", "response_json_schema": {"type": "object"}}}
    chat = G.parse(body, path_model="m").chat
    assert chat["max_tokens"] == 5 and chat["top_k"] == 2 and chat["response_format"]["type"] == "json_schema"


R = PROVIDERS["openai_responses"]


@pytest.mark.parametrize("extra, error, param", [
    ({"reasoning": {"effort": "extreme"}}, BadRequest, "reasoning.effort"),
    ({"reasoning": {"effort": ""}}, BadRequest, "reasoning.effort"),
    ({"tools": [{"type": "mcp", "server_label": "fs", "server_url": "https://x/mcp"}]}, UnsupportedFeature,
     "tools[0].type"),
])
def test_what_the_responses_api_would_do_and_the_engine_cannot_is_refused(extra, error, param):
    with pytest.raises(error) as info:
        R.parse({"model": "m", "input": "x", **extra})
    assert info.value.param == param and info.value.status == 400


@pytest.mark.parametrize("effort", ["none", "minimal", "low", "medium", "high", "xhigh"])
def test_every_documented_reasoning_effort_passes(effort):
    chat = R.parse({"model": "m", "input": "x", "reasoning": {"effort": effort}, "truncation": "disabled",
                    "tools": [{"type": "web_search"}]}).chat  # a hosted tool is still dropped
    assert chat["reasoning_effort"] == effort and "tools" not in chat
