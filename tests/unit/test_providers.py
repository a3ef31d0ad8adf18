"""Field-level translation rules of the Anthropic, Responses and Gemini providers, checked
against the vendors' SDK types."""

from __future__ import annotations

import json

import pytest
from anthropic.types import Message
from google.genai import types as gt
from openai.types.responses import Response

from proxy.errors import BadRequest, UnsupportedFeature
from proxy.providers import PROVIDERS, ToolCall, Turn
from proxy.providers.google_schema import json_schema
from proxy.providers.openai_responses import encrypt_reasoning
from proxy.providers.tool_errors import TOOL_ERROR

A, R, G = PROVIDERS["anthropic"], PROVIDERS["openai_responses"], PROVIDERS["google"]
TOOL = {"name": "bash", "description": "run", "input_schema": {"type": "object"}}


def turn(content="hi", calls=(), reasoning=None, finish="stop", stop_reason=None):
    return Turn(id="chatcmpl-1", model="m", created=1, content=content, reasoning=reasoning,
                tool_calls=[ToolCall(f"call_{i}", n, json.dumps(a)) for i, (n, a) in enumerate(calls)],
                finish_reason=finish, stop_reason=stop_reason, prompt_tokens=5, completion_tokens=3)


# --- Anthropic ---------------------------------------------------------------------------------

def anthropic_body(**kw):
    return {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}], **kw}


@pytest.mark.parametrize("choice, expected", [
    ({"type": "auto"}, {"tool_choice": "auto"}),
    ({"type": "any"}, {"tool_choice": "required"}),
    ({"type": "none"}, {"tool_choice": "none"}),
    ({"type": "tool", "name": "bash", "disable_parallel_tool_use": True},
     {"tool_choice": {"type": "function", "function": {"name": "bash"}}, "parallel_tool_calls": False}),
])
def test_anthropic_tool_choice(choice, expected):
    chat = A.parse(anthropic_body(tools=[TOOL], tool_choice=choice)).chat
    assert {k: chat[k] for k in expected} == expected


def test_anthropic_request_details():
    body = anthropic_body(system=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                          stop_sequences=["END"], temperature=0.2, top_k=5, messages=[
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
            {"type": "text", "text": "look"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                {"type": "text", "text": "file.txt"},
                {"type": "image", "source": {"type": "url", "url": "http://x/i.png"}}]},
            {"type": "text", "text": "and?"}]},
        {"role": "assistant", "content": "The answer is"}],
        tools=[TOOL, {"type": "web_search_20250305", "name": "web_search"}])
    parsed = A.parse(body)
    chat = parsed.chat
    assert chat["messages"][0] == {"role": "system", "content": "a\nb"}
    assert chat["messages"][1]["content"][0] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    assert chat["messages"][2] == {"role": "assistant", "content": None, "reasoning_content": "hmm", "tool_calls": [
        {"id": "toolu_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}
    assert chat["messages"][3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "file.txt"}
    assert chat["messages"][4]["content"][0]["image_url"]["url"] == "http://x/i.png"  # tool images follow
    assert chat["messages"][5] == {"role": "assistant", "content": "The answer is"}
    assert chat["continue_final_message"] is True and chat["add_generation_prompt"] is False
    assert chat["stop"] == ["END"] and chat["temperature"] == 0.2 and chat["top_k"] == 5
    assert [t["function"]["name"] for t in chat["tools"]] == ["bash"]
    assert parsed.extra["dropped_tools"] == ["web_search"]


@pytest.mark.parametrize("t, reason, sequence", [
    (turn(), "end_turn", None),
    (turn(finish="length"), "max_tokens", None),
    (turn(stop_reason="END"), "stop_sequence", "END"),
    (turn(content=None, calls=[("bash", {"c": 1})], finish="tool_calls"), "tool_use", None),
])
def test_anthropic_response_and_stop_reasons(t, reason, sequence):
    parsed = A.parse(anthropic_body())
    msg = Message.model_validate(A.render(t, parsed))
    assert (msg.stop_reason, msg.stop_sequence) == (reason, sequence)
    assert msg.usage.input_tokens == 5 and msg.usage.output_tokens == 3


def test_anthropic_thinking_block_has_a_signature():
    msg = Message.model_validate(A.render(turn(reasoning="r", calls=[("bash", {})], content=None), A.parse(anthropic_body())))
    assert [b.type for b in msg.content] == ["thinking", "tool_use"] and msg.content[0].signature


def test_anthropic_structured_output_is_the_engines_json_schema():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    for body in (anthropic_body(output_config={"format": {"type": "json_schema", "schema": schema}, "effort": "low"}),
                 anthropic_body(output_format={"type": "json_schema", "schema": schema})):
        fmt = A.parse(body).chat["response_format"]
        assert fmt == {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    assert "response_format" not in A.parse(anthropic_body(output_config={"effort": "high"})).chat
    for bad in ({"format": {"type": "xml"}}, "json"):
        with pytest.raises(BadRequest):
            A.parse(anthropic_body(output_config=bad))


@pytest.mark.parametrize("body, param", [
    ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    (anthropic_body(messages=[]), "messages"),
    (anthropic_body(messages=[{"role": "bot", "content": "x"}]), "messages.0.role"),
    (anthropic_body(tools=[TOOL], tool_choice={"type": "tool", "name": "nope"}), "tool_choice.name"),
    (anthropic_body(messages=[{"role": "user", "content": [{"type": "tool_result"}]}]), "messages.0.content.0.tool_use_id"),
    (anthropic_body(thinking={"type": "sometimes"}), "thinking.type"),
    (anthropic_body(thinking="on"), "thinking.type"),
    (anthropic_body(tools=[TOOL], tool_choice="auto"), "tool_choice"),
    (anthropic_body(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "bash", "input": "ls"}]}]), "messages.1.content.0.input"),
    (anthropic_body(tools=[{"name": "f"}]), "tools.0.input_schema"),
    (anthropic_body(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "out"}]}]), "messages.1.content.0.type"),
    (anthropic_body(tools=[{"type": "computer_20250124", "name": "computer"}]), "tools.0.type"),
    (anthropic_body(tool_choice={"type": "tool", "name": "bash"}), "tool_choice.name"),  # no tools at all
])
def test_anthropic_bad_requests(body, param):
    with pytest.raises(BadRequest) as info:
        A.parse(body)
    assert info.value.param == param


def test_anthropic_unsupported_block_is_a_clear_400():
    with pytest.raises(UnsupportedFeature) as info:
        A.parse(anthropic_body(messages=[{"role": "user", "content": [{"type": "document", "source": {"type": "base64"}}]}]))
    assert info.value.status == 400 and "document" in info.value.message


# --- Responses ---------------------------------------------------------------------------------

def test_responses_items_group_into_turns():
    enc = encrypt_reasoning("secret thoughts")
    parsed = R.parse({"model": "m", "instructions": "be brief", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": enc},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "bash", "arguments": "{\"x\": 1}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
        {"type": "custom_tool_call", "call_id": "c3", "name": "apply_patch", "input": "*** Begin"},
    ], "tools": [{"type": "custom", "name": "apply_patch"}]})
    msgs = parsed.chat["messages"]
    assert msgs[0] == {"role": "system", "content": "be brief"}
    assert msgs[2]["reasoning_content"] == "secret thoughts" and msgs[2]["content"] == "ok"
    assert [c["id"] for c in msgs[2]["tool_calls"]] == ["c1", "c2"]  # parallel calls: one turn
    assert msgs[3] == {"role": "tool", "tool_call_id": "c1", "content": "one"}
    assert msgs[4]["content"] == "two"
    assert json.loads(msgs[5]["tool_calls"][0]["function"]["arguments"]) == {"input": "*** Begin"}


def test_responses_output_items_validate_with_the_sdk():
    parsed = R.parse({"model": "m", "input": "x", "include": ["reasoning.encrypted_content"],
                      "tools": [{"type": "namespace", "name": "ns", "description": "agents",
                                 "tools": [{"type": "function", "name": "spawn"}]},
                                {"type": "custom", "name": "apply_patch"}]})
    t = turn(content="done", reasoning="why", calls=[("spawn", {"a": 1}), ("apply_patch", {"input": "diff"})])
    resp = Response.model_validate(R.render(t, parsed))
    kinds = [o.type for o in resp.output]
    assert kinds == ["reasoning", "message", "function_call", "custom_tool_call"]
    assert resp.output[0].encrypted_content and resp.output[2].namespace == "ns"
    assert resp.output[3].input == "diff" and resp.output_text == "done"
    assert resp.usage.total_tokens == 8 and resp.status == "completed"
    cut = Response.model_validate(R.render(turn(finish="length"), parsed))
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert [o.status for o in cut.output] == ["incomplete"]  # the message the limit stopped
    thinking = Response.model_validate(R.render(turn(content=None, reasoning="still thinking", finish="length"), parsed))
    assert [(o.type, o.status) for o in thinking.output] == [("reasoning", "incomplete")]
    assert [o.status for o in resp.output] == ["completed"] * 4


def test_reasoning_tokens_are_reported_apart_in_responses_and_gemini_usage():
    tokens = ["<think>", "\n", "plan", "\n", "</think>", "\n\n", "done"]
    thought = turn(content="done", reasoning="plan")
    thought.logprobs = [{"token": t, "logprob": -0.1} for t in tokens]
    thought.completion_tokens = len(tokens)
    assert thought.reasoning_tokens == 5
    resp = Response.model_validate(R.render(thought, R.parse({"model": "m", "input": "x"})))
    assert resp.usage.output_tokens_details.reasoning_tokens == 5 and resp.usage.output_tokens == 7
    usage = gt.GenerateContentResponse.model_validate(
        G.render(thought, G.parse({"contents": [{"parts": [{"text": "x"}]}]}, path_model="m"))).usage_metadata
    assert (usage.thoughts_token_count, usage.candidates_token_count, usage.total_token_count) == (5, 2, 12)
    cut = turn(content=None, reasoning="still")  # cut while thinking: every token was thinking
    assert cut.reasoning_tokens == cut.completion_tokens == 3
    assert turn(content="hi").reasoning_tokens == 0
    plain = G.render(turn(content="hi"), G.parse({"contents": [{"parts": [{"text": "x"}]}]}, path_model="m"))
    assert plain["usageMetadata"] == {"promptTokenCount": 5, "candidatesTokenCount": 3, "totalTokenCount": 8}


@pytest.mark.parametrize("body, error", [
    ({"model": "m"}, BadRequest),
    ({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}, BadRequest),  # names no stored item
    ({"model": "m", "input": [{"type": "item_reference"}]}, BadRequest),
    ({"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}, BadRequest),
    ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, UnsupportedFeature),
    ({"model": "m", "input": "x", "include": "message.output_text.logprobs"}, BadRequest),
    ({"model": "m", "input": "x", "top_logprobs": 21}, BadRequest),
    ({"model": "m", "input": "x", "store": "no"}, BadRequest),
    ({"model": "m", "input": "x", "metadata": "x"}, BadRequest),
    ({"model": "m", "input": "x", "parallel_tool_calls": "no"}, BadRequest),
    ({"model": "m", "input": "x", "reasoning": "high"}, BadRequest),
    ({"model": "m", "input": "x", "prompt": {"id": "pmpt_1"}}, UnsupportedFeature),
    ({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": "sometimes"}, BadRequest),
    ({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "web_search"}},
     UnsupportedFeature),
    ({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f"}],
      "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "g"}]}}, BadRequest),
    ({"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {"a": 1}}]},
     BadRequest),
    ({"model": "m", "input": "x", "tool_choice": {"type": "function", "name": "nope"}}, BadRequest),  # no tools
    ({"model": "m", "input": "x", "instructions": [{"role": "developer", "content": "rules"}]}, BadRequest),  # not dropped
    ({"model": "m", "input": "x", "instructions": 123}, BadRequest),
    ({"model": "m", "input": "x", "truncation": "sometimes"}, BadRequest),
])
def test_responses_bad_requests(body, error):
    with pytest.raises(error):
        R.parse(body)


@pytest.mark.parametrize("asked, echoed", [(None, "disabled"), ("disabled", "disabled"), ("auto", "auto")])
def test_responses_echo_the_truncation_asked_for(asked, echoed):
    body = {"model": "m", "input": "x", **({"truncation": asked} if asked else {})}
    parsed = R.parse(body)
    assert Response.model_validate(R.render(turn(content="ok"), parsed)).truncation == echoed
    assert R.shell(parsed, "in_progress")["truncation"] == echoed


def test_responses_tool_choice_forces_a_custom_tool_or_limits_to_allowed_ones():
    tools = [{"type": "function", "name": "f"}, {"type": "function", "name": "g"}, {"type": "custom", "name": "patch"}]
    forced = R.parse({"model": "m", "input": "x", "tools": tools, "tool_choice": {"type": "custom", "name": "patch"}})
    assert forced.chat["tool_choice"] == {"type": "function", "function": {"name": "patch"}}
    limited = R.parse({"model": "m", "input": "x", "tools": tools, "tool_choice": {
        "type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "g"}]}})
    assert [t["function"]["name"] for t in limited.chat["tools"]] == ["g"] and limited.chat["tool_choice"] == "required"


@pytest.mark.parametrize("fields, param", [
    ({"temperature": 1.5}, "temperature"), ({"top_p": -0.1}, "top_p"),  # Anthropic's ranges are 0..1
    ({"thinking": {"type": "enabled", "budget_tokens": 512}}, "thinking.budget_tokens"),
    ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 1024}, "max_tokens"),
])
def test_anthropic_refuses_what_anthropic_refuses(fields, param):
    with pytest.raises(BadRequest) as info:
        A.parse(anthropic_body(**fields))
    assert info.value.param == param
    ok = A.parse(anthropic_body(temperature=1.0, top_p=0.0, max_tokens=2048,
                                thinking={"type": "enabled", "budget_tokens": 1024})).chat
    assert (ok["temperature"], ok["top_p"], ok["chat_template_kwargs"]) == (1.0, 0.0, {"enable_thinking": True})


# --- Gemini ------------------------------------------------------------------------------------

def test_gemini_ids_are_preserved_or_synthesised_consistently():
    parsed = G.parse({"contents": [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"text": "plan", "thought": True},
                                    {"functionCall": {"name": "read", "args": {"p": "a"}}},
                                    {"functionCall": {"name": "read", "args": {"p": "b"}}},
                                    {"functionCall": {"name": "ls", "args": {}, "id": "given"}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "ls", "id": "given", "response": {"output": "x"}}},
                                   {"functionResponse": {"name": "read", "response": {"output": "A"}}},
                                   {"functionResponse": {"name": "read", "response": {"error": "no"}}}]},
    ]}, path_model="m")
    msgs = parsed.chat["messages"]
    ids = [c["id"] for c in msgs[1]["tool_calls"]]
    assert ids == ["call_1_1", "call_1_2", "given"] and msgs[1]["reasoning_content"] == "plan"
    assert [(m["tool_call_id"], m["content"]) for m in msgs[2:]] == [("given", "x"), ("call_1_1", "A"),
                                                                 ("call_1_2", f"{TOOL_ERROR}\nno")]


def test_gemini_consecutive_model_contents_are_one_assistant_turn():
    # A streamed turn as the genai SDK's chat keeps it: one model Content per chunk.
    whole = {"role": "model", "parts": [{"text": "plan", "thought": True}, {"text": "Let me look."},
                                        {"functionCall": {"name": "read", "args": {"p": "a"}, "id": "c1"}}]}
    split = [{"role": "model", "parts": [p]} for p in whole["parts"]] + [{"role": "model", "parts": []}]
    user = {"role": "user", "parts": [{"text": "go"}]}
    answer = {"role": "user", "parts": [{"functionResponse": {"name": "read", "id": "c1", "response": {"output": "A"}}}]}
    merged = G.parse({"contents": [user, *split, answer]}, path_model="m").chat["messages"]
    assert merged == G.parse({"contents": [user, whole, answer]}, path_model="m").chat["messages"]
    assert [m["role"] for m in merged] == ["user", "assistant", "tool"]
    # a user content between two model contents keeps them apart
    apart = G.parse({"contents": [user, split[1], user, split[1]]}, path_model="m").chat["messages"]
    assert [m["role"] for m in apart] == ["user", "assistant", "user", "assistant"]
    with pytest.raises(BadRequest, match=r"contents\[2\]\.parts\[0\]"):  # errors still name the content
        G.parse({"contents": [user, split[0], {"role": "model", "parts": ["x"]}]}, path_model="m")


def test_gemini_openapi_schema_and_tool_config():
    chat = G.parse({"contents": [{"parts": [{"text": "x"}]}],
                    "tools": [{"functionDeclarations": [
                        {"name": "a", "parameters": {"type": "OBJECT", "properties": {"q": {"type": "STRING"}}}},
                        {"name": "b"}]}, {"googleSearch": {}}],
                    "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["a"]}},
                    "generationConfig": {"maxOutputTokens": 7, "stopSequences": ["X"], "seed": 3,
                                         "thinkingConfig": {"thinkingBudget": 0}}}, path_model="m").chat
    assert chat["tools"] == [{"type": "function", "function": {
        "name": "a", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "a"}}
    assert (chat["max_tokens"], chat["stop"], chat["seed"]) == (7, ["X"], 3)
    assert chat["chat_template_kwargs"] == {"enable_thinking": False}


def test_gemini_schemas_become_json_schema_whatever_their_spelling():
    """The genai SDK's snake_case keywords, OpenAPI's nullable, property names left alone."""
    sdk_schema = {"type": "OBJECT", "property_ordering": ["a", "max_items"], "required": ["a"], "properties": {
        "a": {"type": "STRING", "min_length": 1},
        "max_items": {"type": "ARRAY", "nullable": True, "max_items": 3, "items": {"type": "INTEGER"}},
        "either": {"any_of": [{"type": "STRING"}, {"type": "NUMBER"}], "nullable": True}}}
    want = {"type": "object", "required": ["a"], "properties": {
        "a": {"type": "string", "minLength": 1},
        "max_items": {"type": ["array", "null"], "maxItems": 3, "items": {"type": "integer"}},
        "either": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}]}}}
    body = {"contents": [{"parts": [{"text": "x"}]}],
            "tools": [{"function_declarations": [{"name": "f", "parameters": sdk_schema}]}],
            "generation_config": {"response_mime_type": "application/json", "response_schema": sdk_schema}}
    chat = G.parse(body, path_model="m").chat
    assert chat["tools"][0]["function"]["parameters"] == want
    assert chat["response_format"]["json_schema"]["schema"] == want
    referenced = {"type": "OBJECT", "defs": {"Mode": {"type": "STRING", "enum": ["a", "b"], "nullable": True}},
                  "properties": {"mode": {"ref": "#/$defs/Mode"}, "nullable": {"type": "BOOLEAN"}}}
    assert json_schema(referenced) == {"type": "object", "$defs": {"Mode": {"type": ["string", "null"], "enum": ["a", "b", None]}},
                                       "properties": {"mode": {"$ref": "#/$defs/Mode"}, "nullable": {"type": "boolean"}}}
    given = {"type": "object", "properties": {"NULLABLE": {"type": "string"}}, "additionalProperties": False}
    as_json = G.parse({**body, "generation_config": {"response_mime_type": "application/json",
                                                     "response_json_schema": given}}, path_model="m").chat
    assert as_json["response_format"]["json_schema"]["schema"] == given  # JSON Schema already: as sent


def test_gemini_non_ascii_tool_calls_and_results_reach_the_engine_as_written():
    chat = G.parse({"contents": [
        {"role": "user", "parts": [{"text": "Wetter?"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "w", "args": {"city": "Zürich"}, "id": "c"}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "w", "id": "c", "response": {"result": "東京: 晴れ"}}}]},
    ]}, path_model="m").chat
    assert chat["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Zürich"}'
    assert chat["messages"][2]["content"] == '{"result": "東京: 晴れ"}'
    a = A.parse(anthropic_body(messages=[
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "w", "input": {"city": "Zürich"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}])).chat
    assert a["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Zürich"}'


def test_a_choice_among_hosted_or_server_tools_only_is_theirs_to_make():
    """Only a request with no tools at all has a named tool_choice refused (the vendors run their own tools)."""
    a = A.parse(anthropic_body(tools=[{"type": "web_search_20250305", "name": "web_search"}],
                               tool_choice={"type": "tool", "name": "web_search"})).chat
    assert "tools" not in a and "tool_choice" not in a
    r = R.parse({"model": "m", "input": "x", "tools": [{"type": "web_search"}], "tool_choice": "required"}).chat
    assert "tools" not in r


def test_gemini_cached_content_is_refused_not_ignored():
    with pytest.raises(UnsupportedFeature, match="cachedContent"):
        G.parse({"contents": [{"parts": [{"text": "x"}]}], "cached_content": "cachedContents/abc"}, path_model="m")


def test_gemini_response_validates_with_the_sdk():
    parsed = G.parse({"contents": [{"parts": [{"text": "x"}]}],
                      "generationConfig": {"thinkingConfig": {"includeThoughts": True}}}, path_model="m")
    r = gt.GenerateContentResponse.model_validate(G.render(turn(content=None, reasoning="r", calls=[("ls", {"a": 1})]), parsed))
    parts = r.candidates[0].content.parts
    assert parts[0].thought and parts[0].text == "r"
    assert parts[1].function_call.name == "ls" and parts[1].function_call.args == {"a": 1} and parts[1].thought_signature
    assert r.candidates[0].finish_reason == gt.FinishReason.STOP and r.usage_metadata.total_token_count == 8
    hidden = G.parse({"contents": [{"parts": [{"text": "x"}]}]}, path_model="m")
    assert all(not p.get("thought") for p in G.render(turn(reasoning="r"), hidden)["candidates"][0]["content"]["parts"])
    assert G.render(turn(finish="length"), hidden)["candidates"][0]["finishReason"] == "MAX_TOKENS"


@pytest.mark.parametrize("body", [
    {"contents": []},
    {"contents": [{"role": "robot", "parts": [{"text": "x"}]}]},
    {"contents": [{"parts": [{"executableCode": {"code": "1"}}]}]},
    {"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"candidateCount": 2}},
    {"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"responseLogprobs": "yes"}},
    {"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"responseLogprobs": True, "logprobs": 21}},
    {"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"topK": 2.5}},
    {"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"temperature": 5}},  # Gemini's range: 0..2
    {"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"topP": 1.5}},
    {"contents": [{"parts": [{"text": "x"}]}], "tools": [{"functionDeclarations": [{"name": "f"}]}],
     "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}},
])
def test_gemini_bad_requests(body):
    with pytest.raises(BadRequest):
        G.parse(body, path_model="m")


def _tool_result_turn(content):
    return anthropic_body(tools=[TOOL], messages=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": content}]}])


def test_anthropic_tool_results_keep_every_block_the_harness_sent():
    """Documents and search results inside a tool result reach the prompt as text (they were
    dropped, the recorded prompt differing from what the agent sent); a block the engine cannot
    take is refused."""
    chat = A.parse(_tool_result_turn([
        {"type": "text", "text": "head"},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "DOC TEXT"}},
        {"type": "search_result", "source": "https://x/doc", "title": "Doc", "content": [{"type": "text", "text": "hit"}]},
    ])).chat
    assert chat["messages"][2] == {"role": "tool", "tool_call_id": "t1", "content": "headDOC TEXTDoc\nhttps://x/doc\nhit"}
    with pytest.raises(UnsupportedFeature, match="messages.2.content.0.content.0"):
        A.parse(_tool_result_turn([{"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                                                      "data": "JVBERi0="}}]))
    with pytest.raises(BadRequest, match="search_result"):
        A.parse(_tool_result_turn([{"type": "search_result", "source": "s", "title": "t", "content": "bare"}]))


@pytest.mark.parametrize("fmt, missing", [({"type": "json_schema", "schema": {"type": "object"}}, "text.format.name"),
                                          ({"type": "json_schema", "name": "out"}, "text.format.schema")])
def test_responses_json_schema_format_needs_its_name_and_schema(fmt, missing):
    with pytest.raises(BadRequest) as info:
        PROVIDERS["openai_responses"].parse({"model": "m", "input": "hi", "text": {"format": fmt}})
    assert info.value.param == missing
    ok = PROVIDERS["openai_responses"].parse({"model": "m", "input": "hi", "text": {"format": {
        "type": "json_schema", "name": "out", "schema": {"type": "object"}}}}).chat
    assert ok["response_format"]["json_schema"] == {"name": "out", "schema": {"type": "object"}}


@pytest.mark.parametrize("messages, where", [
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}], "messages.0.content.0"),
    ([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                                   {"type": "tool_result", "tool_use_id": "t2", "content": "?"}]}], "messages.2.content.1"),
    ([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
      {"role": "assistant", "content": "done"},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "again"}]}], "messages.4.content.0"),
])
def test_anthropic_tool_result_must_answer_a_tool_use_of_the_message_before(messages, where):
    with pytest.raises(BadRequest, match="unexpected `tool_use_id`") as info:
        A.parse(anthropic_body(tools=[TOOL], messages=messages))
    assert info.value.param == where


@pytest.mark.parametrize("max_tokens, is_prewarm", [(0, True), (False, False), (0.0, False), (1, False), (None, False)])
def test_only_an_integer_zero_max_tokens_is_an_anthropic_prewarm(max_tokens, is_prewarm):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "system": "s", "max_tokens": max_tokens}
    chat = PROVIDERS["anthropic"].prewarm_chat(body)
    assert (chat is not None) == is_prewarm
    if chat is not None:  # the prompt the count measures: as the call would sample it, no output limit
        assert "max_tokens" not in chat and [m["role"] for m in chat["messages"]] == ["system", "user"]
    assert all(PROVIDERS[name].prewarm_chat(body) is None for name in PROVIDERS if name != "anthropic")


def test_the_prewarm_hint_finds_every_zero_max_tokens_a_body_may_spell():
    hint = PROVIDERS["anthropic"].prewarm_hint
    for raw in (b'{"max_tokens":0,"model":"m"}', b'{"model":"m", "max_tokens" : 0 }', b'{"max_tokens":0}',
                b'{"max_tokens":-0}'):
        assert hint.search(raw), raw
    for raw in (b'{"max_tokens":01}', b'{"max_tokens":0.5}', b'{"max_tokens":10}', b'{"max_tokens":"0"}'):
        assert not hint.search(raw), raw
