"""Every field of a rich, valid request of each provider, swapped for a value of the wrong
type, either still parses or is refused as the client's error (a ``ProxyError`` naming the
field) — never a raw ``TypeError`` whose text would reach the caller as "invalid request:
TypeError: sequence item 0: expected str instance". Exhaustive over paths and a fixed set of
wrong values, so a regression names the exact field. I/O-free: ``Provider.parse`` only."""

from __future__ import annotations

import copy
from typing import Any, Iterator

import pytest

from proxy.errors import ProxyError
from proxy.providers import PROVIDERS

RICH = {
    "openai_chat": {
        "model": "m", "max_tokens": 5, "temperature": 0.5, "stop": ["x"], "logprobs": True, "top_logprobs": 2,
        "stream": False, "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "r"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
    "anthropic": {
        "model": "m", "max_tokens": 2048, "temperature": 0.3, "stop_sequences": ["x"],
        "system": [{"type": "text", "text": "s"}],
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "x"},
                                              {"type": "text", "text": "a"},
                                              {"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                          "content": [{"type": "text", "text": "r"}]},
                                         {"type": "text", "text": "go on"}]}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "thinking": {"type": "enabled", "budget_tokens": 1024}, "tool_choice": {"type": "auto"}},
    "openai_responses": {
        "model": "m", "instructions": "s", "max_output_tokens": 5, "temperature": 0.2, "store": False,
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}]},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "r"}],
        "tools": [{"type": "function", "name": "f", "parameters": {}}],
        "text": {"format": {"type": "text"}}, "reasoning": {"effort": "low"},
        "include": ["message.output_text.logprobs"], "top_logprobs": 2},
    "google": {
        "contents": [
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "model", "parts": [{"text": "t", "thought": True}, {"functionCall": {"name": "f", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"x": 1}}}]}],
        "systemInstruction": {"parts": [{"text": "s"}]},
        "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "object"}}]}],
        "generationConfig": {"maxOutputTokens": 5, "temperature": 0.1, "stopSequences": ["x"],
                             "thinkingConfig": {"thinkingBudget": 10, "includeThoughts": True},
                             "responseLogprobs": True, "logprobs": 2}},
}
CONTEXT: dict[str, dict[str, Any]] = {"google": {"path_model": "m"}}
WRONG = [None, 0, -3, 1.5, "s", True, [], [1], [None], {}, {"a": 1}, [{"x": 1}]]


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*prefix, key)
        yield from paths(value, (*prefix, key))


def swapped(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(body)
    node: Any = body
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return body


@pytest.mark.parametrize("name", sorted(RICH))
def test_the_rich_request_parses(name):
    parsed = PROVIDERS[name].parse(copy.deepcopy(RICH[name]), **CONTEXT.get(name, {}))
    assert parsed.chat["messages"], name


@pytest.mark.parametrize("name", sorted(RICH))
def test_a_field_of_the_wrong_type_is_the_clients_error(name):
    provider, raw = PROVIDERS[name], []
    for path in paths(RICH[name]):
        for value in WRONG:
            try:
                provider.parse(swapped(RICH[name], path, value), **CONTEXT.get(name, {}))
            except ProxyError as err:
                assert err.status < 500, (path, value, err)
            except Exception as exc:  # noqa: BLE001 - the point is to name what escaped
                raw.append(f"{'.'.join(map(str, path))} = {value!r}: {type(exc).__name__}: {exc}")
    assert not raw, "\n".join(raw)


GEMINI_TOOL_CONFIG = {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}}


@pytest.mark.parametrize("path, value", [
    (("generationConfig", "responseModalities"), "AUDIO"),  # was answered in text
    (("generationConfig", "thinkingConfig"), "on"),
    (("generationConfig", "responseSchema"), '{"type": "object"}'),  # fell back to plain JSON mode
    (("generationConfig", "responseJsonSchema"), "object"),
    (("toolConfig",), "ANY"),
    (("toolConfig", "functionCallingConfig"), "ANY"),
    (("toolConfig", "functionCallingConfig", "allowedFunctionNames"), "f"),
    (("contents", 1, "parts", 1, "functionCall", "args"), "x=1"),
    (("tools", 0, "functionDeclarations", 0, "parameters"), '{"type": "object"}'),
])
def test_a_gemini_field_whose_type_decides_what_is_asked_is_refused_in_another_type(path, value):
    """Read as absent, each of these changed what the caller got without a word."""
    body = {**copy.deepcopy(RICH["google"]), "toolConfig": copy.deepcopy(GEMINI_TOOL_CONFIG)}
    body["generationConfig"]["responseMimeType"] = "application/json"
    PROVIDERS["google"].parse(copy.deepcopy(body), path_model="m")  # the body as it is: served
    with pytest.raises(ProxyError) as info:
        PROVIDERS["google"].parse(swapped(body, path, value), path_model="m")
    assert info.value.status == 400 and info.value.param.endswith(str(path[-1])), (info.value.param, str(info.value))


@pytest.mark.parametrize("field, value", [("system", [{"type": "text"}]),  # its text was read as ""
                                          ("system", [{"type": "text", "text": 5}]),
                                          ("metadata", "user-1")])  # was ignored
def test_an_anthropic_field_of_the_wrong_shape_is_refused_as_anthropic_does(field, value):
    body = {**copy.deepcopy(RICH["anthropic"]), "metadata": {"user_id": "u"}}
    PROVIDERS["anthropic"].parse(copy.deepcopy(body))  # the body as it is: served
    with pytest.raises(ProxyError) as info:
        PROVIDERS["anthropic"].parse({**body, field: value})
    assert info.value.status == 400 and info.value.param == field, str(info.value)


@pytest.mark.parametrize("n", [{}, True, "1", 0])
def test_a_chat_n_that_is_no_count_is_refused_naming_it(n):
    """``n=True`` was taken as 1 (True == 1) and ``n={}`` got a 400 quoting a TypeError."""
    with pytest.raises(ProxyError) as info:
        PROVIDERS["openai_chat"].parse({**copy.deepcopy(RICH["openai_chat"]), "n": n})
    assert info.value.status == 400 and info.value.param == "n" and "integer" in str(info.value)
