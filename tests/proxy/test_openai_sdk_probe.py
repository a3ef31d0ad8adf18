"""OpenAI SDK calls beyond a harness's usual ones, through the official SDK and the reference
model: what a trainer's client (slime, verl, SkyRL: often with ``max_retries=0``) may send, and
what the SDK must be able to read back."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import openai
import pytest

from tests.proxy.test_sdks import records
from tests.support import running_session


def openai_client(stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.settings.proxy_url}/s/{key}/v1", api_key=key, max_retries=0)


def _post(sock: socket.socket, path: str, body: dict) -> bytes:
    """One request on a kept-alive connection; its answer's head (the body read by its length)."""
    data = json.dumps(body).encode()
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed before the answer"
        got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    while len(rest) < length:
        rest += sock.recv(65536)
    return head


def test_an_answer_given_before_the_body_is_read_keeps_the_connection_usable(ref_stack):
    """An unserved endpoint (the SDK's ``completions.create``) is answered before its body is
    read. The connection used to be closed after that answer without a ``Connection: close``
    header: the SDK's pool sent its next call on it and, without retries, raised
    APIConnectionError ("Server disconnected without sending a response") for a valid call."""
    key = running_session(ref_stack.settings.redis_url)
    url = urlsplit(ref_stack.settings.proxy_url)
    chat = {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        head = _post(sock, f"/s/{key}/v1/completions", {"model": "tiny", "prompt": "hello", "max_tokens": 3})
        assert head.startswith(b"HTTP/1.1 404")
        if b"connection: close" not in head.lower():  # kept alive: the next call on it is answered
            assert _post(sock, f"/s/{key}/v1/chat/completions", chat).startswith(b"HTTP/1.1 200")
    sdk = openai_client(ref_stack, key)
    for _ in range(15):  # through the SDK's own pool: the 404 as its NotFoundError, never a connection error
        try:
            sdk.completions.create(model="tiny", prompt="hello", max_tokens=3)
        except openai.NotFoundError as err:
            assert err.body["code"] == "unsupported_endpoint"
        sdk.chat.completions.create(**chat)
    assert len([r for r in records(ref_stack, key) if r.get("response_ids")]) == 16


def test_a_responses_tool_of_an_unknown_type_is_refused_not_dropped_as_hosted(ref_stack):
    """Only OpenAI's hosted tools (which run at the vendor) are dropped. A type the proxy does not
    know -- a misspelt function tool, a client built-in newer than the proxy -- was dropped as if
    hosted: the policy answered without the agent's tool, and nothing said so."""
    key = running_session(ref_stack.settings.redis_url)
    sdk = openai_client(ref_stack, key)
    misspelt = {"type": "functions", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.create(model="tiny", input="Weather in Paris?", max_output_tokens=2, tools=[misspelt])
    assert info.value.body["param"] == "tools[0].type" and "'functions'" in info.value.body["message"]
    assert records(ref_stack, key) == []
    for hosted in ({"type": "web_search_preview"}, {"type": "file_search", "vector_store_ids": ["vs_1"]},
                   {"type": "code_interpreter", "container": {"type": "auto"}}, {"type": "image_generation"}):
        sdk.responses.create(model="tiny", input="hi", max_output_tokens=2, tools=[hosted])  # still dropped
    assert ["tools" in r["normalized_request"] for r in records(ref_stack, key)] == [False] * 4


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_a_custom_tool_inside_a_namespace_reaches_the_policy_and_its_calls_come_back_as_custom(ref_stack, stream):
    """The SDK's NamespaceToolParam groups function and custom tools. A namespace's custom tool
    was skipped: the policy never saw it, and nothing said so."""
    key = running_session(ref_stack.settings.redis_url)
    sdk = openai_client(ref_stack, key)
    weather = {"type": "namespace", "name": "weather", "description": "Weather tools.", "tools": [
        {"type": "function", "name": "get_forecast", "parameters": {"type": "object", "properties": {}}},
        {"type": "custom", "name": "get_weather", "description": "Current weather of a city."}]}
    kw = dict(model="sdk-tools", input="What is the weather in Paris and Rome?", tools=[weather])
    if stream:
        with sdk.responses.stream(**kw) as events:
            response = events.get_final_response()
    else:
        response = sdk.responses.create(**kw)
    req = records(ref_stack, key)[-1]["normalized_request"]
    tools = {t["function"]["name"]: t["function"] for t in req["tools"]}
    assert set(tools) == {"get_forecast", "get_weather"}
    assert tools["get_weather"]["description"] == "Current weather of a city."
    assert tools["get_weather"]["parameters"]["properties"] == {"input": {"type": "string"}}
    calls = [o for o in response.output if o.type != "reasoning"]
    assert [(o.type, o.name, o.namespace) for o in calls] == [("custom_tool_call", "get_weather", "weather")] * 2
    with pytest.raises(openai.BadRequestError) as info:  # a type a namespace cannot hold is refused, not skipped
        sdk.responses.create(model="tiny", input="hi", max_output_tokens=2, tools=[
            {"type": "namespace", "name": "web", "description": "d", "tools": [{"type": "web_search"}]}])
    assert info.value.body["param"] == "tools[0].tools[0].type"


def test_a_responses_include_openai_does_not_know_is_refused_not_ignored(ref_stack):
    """A misspelt include (the logprobs one without its final s) was ignored: the answer came
    back without the logprobs asked for, and nothing said so. OpenAI refuses it; so does the proxy.
    The includes OpenAI knows are taken (those for hosted tools have nothing to add here)."""
    key = running_session(ref_stack.settings.redis_url)
    sdk = openai_client(ref_stack, key)
    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.create(model="tiny", input="hi", max_output_tokens=2, include=["message.output_text.logprob"])
    assert info.value.body["param"] == "include" and "'message.output_text.logprob'" in info.value.body["message"]
    assert records(ref_stack, key) == []
    with pytest.raises(openai.BadRequestError):  # the token count reads the request as the call does
        sdk.responses.input_tokens.count(model="tiny", input="hi", extra_body={"include": ["bogus"]})
    reply = sdk.responses.create(model="tiny", input="hi", max_output_tokens=2, include=[
        "message.output_text.logprobs", "reasoning.encrypted_content", "file_search_call.results",
        "web_search_call.action.sources", "message.input_image.image_url", "code_interpreter_call.outputs"])
    assert len(reply.output[0].content[0].logprobs) == 2 == len(records(ref_stack, key)[-1]["response_ids"])


def test_a_responses_calls_engine_sampling_extras_reach_the_engine_as_a_chat_calls_do(ref_stack):
    """``extra_body`` sampling fields (top_k, seed, stop, min_tokens, template switches, ...) a
    trainer sets on a Responses call were dropped: the policy sampled otherwise than asked, and
    nothing said so. They now reach the engine as from a Chat call; the extras the proxy cannot
    answer (token ids, guided decoding) are refused as from Chat."""
    key = running_session(ref_stack.settings.redis_url)
    sdk = openai_client(ref_stack, key)
    extra = {"top_k": 1, "seed": 7, "min_tokens": 4, "repetition_penalty": 1.0, "stop": ["###"],
             "chat_template_kwargs": {"enable_thinking": False}}
    greedy = [sdk.responses.create(model="tiny", input="hi", max_output_tokens=4, temperature=1.0,
                                   reasoning={"effort": "low"}, extra_body=extra) for _ in range(2)]
    chat = sdk.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                       temperature=1.0, reasoning_effort="low", extra_body=extra)
    recs = records(ref_stack, key)
    for rec in recs[:2]:
        req = rec["normalized_request"]
        assert {k: req.get(k) for k in extra} == extra  # the caller's switch wins over the effort's
    assert recs[0]["response_ids"] == recs[1]["response_ids"] == recs[2]["response_ids"]  # top_k 1: greedy
    assert greedy[0].output_text == greedy[1].output_text == chat.choices[0].message.content
    for unserved in ({"return_token_ids": True}, {"guided_json": {"type": "object"}}):
        with pytest.raises(openai.BadRequestError) as info:
            sdk.responses.create(model="tiny", input="hi", max_output_tokens=2, extra_body=unserved)
        assert info.value.body["param"] == next(iter(unserved))
        assert info.value.body["code"] == "unsupported_feature"
    assert len(records(ref_stack, key)) == 3


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("extra", [
    {"allowed_token_ids": [1, 2, 3]}, {"bad_words": ["the"]}, {"logits_processors": ["my.Processor"]},
    {"vllm_xargs": {"boost": 1}}, {"chat_template": "{{ messages[0].content }}"},
    {"documents": [{"title": "a", "text": "b"}]}, {"add_special_tokens": True}, {"truncate_prompt_tokens": 3},
], ids=lambda extra: next(iter(extra)))
def test_a_vllm_prompt_or_sampling_extra_never_passed_on_is_refused_not_dropped(ref_stack, api, extra):
    """vLLM's own prompt and sampling extras were dropped without a word (they are not passed
    on: an SGLang engine knows none of them): the policy sampled after another prompt, or
    unconstrained, than the caller asked for."""
    key = running_session(ref_stack.settings.redis_url)
    sdk = openai_client(ref_stack, key)
    with pytest.raises(openai.BadRequestError) as info:
        if api == "chat":
            sdk.chat.completions.create(model="tiny", max_tokens=2, messages=[{"role": "user", "content": "hi"}],
                                        extra_body=extra)
        else:
            sdk.responses.create(model="tiny", input="hi", max_output_tokens=2, extra_body=extra)
    field = next(iter(extra))
    assert info.value.body["param"] == field and f"'{field}'" in info.value.message
    assert records(ref_stack, key) == []
