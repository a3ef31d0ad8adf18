"""OpenAI Chat conversion, checked against the official SDK's own types and stream accumulator."""

import json

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from proxy.errors import BadRequest, UpstreamError
from proxy.providers import PROVIDERS, turn_from_chat
from proxy.providers.openai_chat import normalize
from tests.unit.sse import parse_sse

CHAT = PROVIDERS["openai_chat"]
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def upstream(content=None, calls=(), finish="stop", reasoning=None):
    msg = {"role": "assistant", "content": content, "reasoning": reasoning}
    if calls:
        msg["tool_calls"] = [{"id": f"chatcmpl-tool-{i}", "type": "function",
                              "function": {"name": n, "arguments": json.dumps(a)}} for i, (n, a) in enumerate(calls)]
    return {"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "up",
            "choices": [{"index": 0, "message": msg, "finish_reason": finish, "stop_reason": None,
                         "token_ids": [1, 2], "logprobs": {"content": [
                             {"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": []},
                             {"token": "b", "logprob": -0.25, "bytes": [98], "top_logprobs": []}]}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
            "prompt_token_ids": [9, 9, 9]}


def render(body, up):
    parsed = CHAT.parse(body)
    turn = turn_from_chat(up, parsed.model)
    return parsed, turn, CHAT.render(turn, parsed)


def test_normalize_renames_and_drops_platform_fields():
    body = {"model": "m", "messages": [{"role": "developer", "content": "sys"}, {"role": "user", "content": "hi"}],
            "max_completion_tokens": 50, "store": True, "metadata": {"a": 1}, "stream": True,
            "stream_options": {"include_usage": True}, "tools": TOOLS, "temperature": 0.5, "user": "u"}
    out = normalize(body)
    assert out["messages"][0]["role"] == "system" and body["messages"][0]["role"] == "developer"
    assert out["max_tokens"] == 50 and out["temperature"] == 0.5 and out["tools"] == TOOLS
    for dropped in ("store", "metadata", "stream", "stream_options", "user", "max_completion_tokens"):
        assert dropped not in out


def test_empty_tools_are_dropped_with_tool_choice():
    out = normalize({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [], "tool_choice": "auto"})
    assert "tools" not in out and "tool_choice" not in out


@pytest.mark.parametrize("body, param", [
    ({"messages": [{"role": "user", "content": "x"}]}, "model"),
    ({"model": 7, "messages": [{"role": "user", "content": "x"}]}, "model"),
    ({"model": "", "messages": [{"role": "user", "content": "x"}]}, "model"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"content": "no role"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": {"a": 1}}, "tools"),
    ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 99}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}, "top_logprobs"),  # without logprobs
    ({"messages": [{"role": "user", "content": "x"}], "logprobs": "yes"}, "logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "stream_options": "x"}, "stream_options"),
    ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 3, "max_tokens": "bad"}, "max_tokens"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": {"a": 1}}]}, "messages[0].content"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "out"}]}, "messages[1].tool_call_id"),
    # a tool result answering no call made before it (OpenAI's 400; the engine would render it)
    ({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "c", "content": "out"}]},
     "messages[1].tool_call_id"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "d", "content": "out"}]}, "messages[2].tool_call_id"),
    # the legacy function-calling fields: the engines would silently drop them
    ({"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f", "parameters": {}}]}, "functions"),
    ({"messages": [{"role": "user", "content": "x"}], "function_call": "auto"}, "function_call"),
])
def test_bad_requests_name_the_parameter(body, param):
    body = {"model": "m", **body} if param != "model" else body
    with pytest.raises(BadRequest) as info:
        normalize(body)
    assert info.value.param == param and info.value.status == 400


def test_what_is_legal_stays_legal():
    ok = normalize({"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "x"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                              "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": None}],
        "logprobs": True, "top_logprobs": 2, "max_completion_tokens": 7, "max_tokens": 9})
    assert ok["max_tokens"] == 7 and len(ok["messages"]) == 3


def test_response_parses_with_the_sdk_and_hides_capture_fields():
    req = {"model": "agent-model", "messages": [{"role": "user", "content": "x"}]}
    _, _, resp = render(req, upstream(calls=[("bash", {"command": "ls"})]))
    parsed = ChatCompletion.model_validate(resp)
    assert parsed.model == "agent-model"
    assert parsed.choices[0].finish_reason == "tool_calls"
    assert json.loads(parsed.choices[0].message.tool_calls[0].function.arguments) == {"command": "ls"}
    assert parsed.choices[0].logprobs is None  # not asked for
    flat = json.dumps(resp)
    assert "prompt_token_ids" not in flat and "token_ids" not in flat


def test_logprobs_and_reasoning_are_returned():
    req = {"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 0}
    _, _, resp = render(req, upstream("ab", reasoning="think"))
    parsed = ChatCompletion.model_validate(resp)
    assert [c.logprob for c in parsed.choices[0].logprobs.content] == [-0.5, -0.25]
    assert resp["choices"][0]["message"]["reasoning_content"] == "think"


def accumulate(chunks):
    state = ChatCompletionStreamState(input_tools=TOOLS)
    for data in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(data))
    return state.get_final_completion()


@pytest.mark.parametrize("content, calls, include_usage", [
    ("hello", [], True),
    (None, [("bash", {"command": "ls"}), ("bash", {"command": "pwd"})], False),
    ("thinking aloud", [("bash", {"command": "echo ü"})], True),
])
@pytest.mark.parametrize("early_head", [False, True])
def test_synthetic_stream_accumulates_to_the_same_message(content, calls, include_usage, early_head):
    req = {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": TOOLS, "stream": True,
           "stream_options": {"include_usage": include_usage}}
    parsed, turn, full = render(req, upstream(content, calls, "tool_calls" if calls else "stop"))
    writer = CHAT.stream(parsed)
    raw = writer.head() + [writer.keepalive()] if early_head else writer.head(turn)
    raw += writer.body(full, turn)
    events = parse_sse(b"".join(raw))
    assert events[-1] == (None, "[DONE]")
    chunks = [json.loads(d) for _, d in events[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    final = accumulate(chunks)
    expected = ChatCompletion.model_validate(full)
    assert final.choices[0].message.content == expected.choices[0].message.content
    assert final.choices[0].finish_reason == expected.choices[0].finish_reason
    got = [(t.id, t.function.name, t.function.arguments) for t in final.choices[0].message.tool_calls or []]
    want = [(t.id, t.function.name, t.function.arguments) for t in expected.choices[0].message.tool_calls or []]
    assert got == want
    assert (chunks[-1].get("usage") is not None) == include_usage
    if include_usage:
        assert chunks[-1]["choices"] == [] and final.usage.total_tokens == 9


def test_mid_stream_error_is_a_data_error_then_done():
    parsed = CHAT.parse({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True})
    writer = CHAT.stream(parsed)
    events = parse_sse(b"".join(writer.head() + writer.error(UpstreamError("engine died"))))
    assert json.loads(events[-2][1])["error"]["message"] == "engine died"
    assert events[-1] == (None, "[DONE]")
