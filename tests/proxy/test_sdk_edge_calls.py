"""SDK calls beyond a harness's usual ones, through the official SDKs and the reference model:
the Anthropic SDK's tool runner (which asks for server-held threads), Anthropic-defined client
tools, google-genai's float-typed ``top_k``, and malformed bodies on the count-tokens routes
(the client's 400 in its API's shape, as on the generate routes)."""

from __future__ import annotations

import gzip
import json

import anthropic
import httpx
import openai
import pytest
import redis
from google import genai
from google.genai import types as gt

from pipeline import keys
from tests.proxy.test_sdks import records
from tests.support import running_session, sid_of

QUESTION = "What is the weather in Paris and Rome?"


def anthropic_client(stack, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"{stack.settings.proxy_url}/s/{key}", api_key=key, max_retries=0)


def test_the_tool_runner_sends_every_turn_whole_when_threads_are_refused(ref_stack):
    key = running_session(ref_stack.settings.redis_url)

    @anthropic.beta_tool
    def get_weather(city: str) -> str:
        """Current weather of a city.

        Args:
            city: the city
        """
        return {"Paris": "sunny", "Rome": "rainy"}[city]

    runner = anthropic_client(ref_stack, key).beta.messages.tool_runner(
        model="sdk-tools", max_tokens=1000, tools=[get_weather], messages=[{"role": "user", "content": QUESTION}])
    replies = list(runner)
    assert replies[-1].content[-1].text == "Paris is sunny and Rome is rainy."
    recs = records(ref_stack, key)
    answered = [r for r in recs if r.get("response_ids")]
    assert len(answered) == 2 and answered[0]["seq"] == 2  # call 1, the thread create, was refused
    for rec in answered:  # each answered call carries the whole conversation and the tools
        req = rec["normalized_request"]
        assert req["messages"][0]["role"] == "user" and QUESTION in str(req["messages"][0]["content"])
        assert [t["function"]["name"] for t in req["tools"]] == ["get_weather"]
    assert [m["role"] for m in answered[1]["normalized_request"]["messages"]] == ["user", "assistant", "tool", "tool"]

    with pytest.raises(anthropic.BadRequestError) as info:  # asked for directly, the refusal says what to do
        anthropic_client(ref_stack, key).beta.messages.create(
            model="tiny", max_tokens=4, messages=[{"role": "user", "content": "hi"}], thread={"type": "create"},
            betas=["message-threads-2026-08-12"])
    assert info.value.body["error"]["details"]["error_code"] == "thread_unsupported_request"
    assert "without `thread`" in info.value.message


def test_anthropic_defined_client_tools_reach_the_policy_with_their_inputs(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    sdk = anthropic_client(ref_stack, key)
    sdk.messages.create(model="tiny", max_tokens=4, messages=[{"role": "user", "content": "List the files."}],
                        tools=[{"type": "bash_20250124", "name": "bash"},
                               {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
                               {"type": "web_search_20250305", "name": "web_search"}],
                        tool_choice={"type": "tool", "name": "bash"})
    req = records(ref_stack, key)[-1]["normalized_request"]
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in req["tools"]}
    assert set(tools) == {"bash", "str_replace_based_edit_tool"}  # the server tool runs at the vendor: dropped
    assert "command" in tools["bash"]["properties"]
    assert tools["str_replace_based_edit_tool"]["properties"]["command"]["enum"] == [
        "view", "create", "str_replace", "insert"]
    assert req["tool_choice"] == {"type": "function", "function": {"name": "bash"}}
    for bad, field in (([{"name": "no_schema"}], "tools.0.input_schema"),
                       ([{"type": "computer_20250124", "name": "computer", "display_width_px": 800,
                          "display_height_px": 600}], "tools.0.type")):
        with pytest.raises(anthropic.BadRequestError) as info:
            sdk.messages.create(model="tiny", max_tokens=4, messages=[{"role": "user", "content": "x"}], tools=bad)
        assert field in info.value.message or field.split(".")[-1] in info.value.message


def test_a_forced_tool_answered_as_stop_by_the_engine_is_still_a_tool_turn(ref_stack):
    # vLLM finishes a forced named function with "stop" (not "tool_calls"); clients see the calls.
    key = running_session(ref_stack.settings.redis_url)
    weather = {"name": "get_weather", "description": "Current weather of a city",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
    msg = anthropic_client(ref_stack, key).messages.create(
        model="sdk-tools", max_tokens=200, messages=[{"role": "user", "content": QUESTION}], tools=[weather],
        tool_choice={"type": "tool", "name": "get_weather"})
    assert msg.stop_reason == "tool_use" and [b.name for b in msg.content if b.type == "tool_use"] == ["get_weather"] * 2
    assert records(ref_stack, key)[-1]["upstream_response"]["choices"][0]["finish_reason"] == "stop"


def test_google_genai_top_k_is_sent_as_a_float_and_taken(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    sdk = genai.Client(api_key=key, http_options=gt.HttpOptions(
        base_url=f"{ref_stack.settings.proxy_url}/s/{key}", retry_options=gt.HttpRetryOptions(attempts=1)))
    config = gt.GenerateContentConfig(top_k=5, max_output_tokens=4)
    sdk.models.generate_content(model="tiny", contents="hi", config=config)
    assert sdk.models.count_tokens(model="tiny", contents="hi").total_tokens > 0
    req = records(ref_stack, key)[-1]["normalized_request"]
    assert req["top_k"] == 5 and isinstance(req["top_k"], int) and req["max_tokens"] == 4
    with pytest.raises(genai.errors.ClientError) as info:  # a fraction is still no integer
        sdk.models.generate_content(model="tiny", contents="hi", config=gt.GenerateContentConfig(top_k=2.5))
    assert info.value.code == 400 and "topK" in str(info.value)


def test_google_genai_streamed_chat_history_is_one_turn_per_answer(ref_stack):
    # The SDK's streaming chat keeps each streamed chunk (thought, each functionCall) as a model
    # Content of its own; the next call must still render the turn exactly as it was sampled.
    key = running_session(ref_stack.settings.redis_url)
    sdk = genai.Client(api_key=key, http_options=gt.HttpOptions(
        base_url=f"{ref_stack.settings.proxy_url}/s/{key}", retry_options=gt.HttpRetryOptions(attempts=1)))
    tool = gt.Tool(function_declarations=[gt.FunctionDeclaration(
        name="get_weather", description="Current weather of a city",
        parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}})])
    chat = sdk.chats.create(model="sdk-tools", config=gt.GenerateContentConfig(
        tools=[tool], automatic_function_calling=gt.AutomaticFunctionCallingConfig(disable=True),
        thinking_config=gt.ThinkingConfig(include_thoughts=True)))
    calls = [p.function_call for chunk in chat.send_message_stream(QUESTION)
             for p in chunk.candidates[0].content.parts if p.function_call]
    assert [h.role for h in chat.get_history()].count("model") == 3  # the thought and two calls, apart
    answers = [gt.Part(function_response=gt.FunctionResponse(name=c.name, id=c.id, response={"output": w}))
               for c, w in zip(calls, ("sunny", "rainy"))]
    text = "".join(chunk.text or "" for chunk in chat.send_message_stream(answers))
    assert text == "Paris is sunny and Rome is rainy."  # the policy saw one assistant turn, not three
    first, second = records(ref_stack, key)
    assert [m["role"] for m in second["normalized_request"]["messages"]] == ["user", "assistant", "tool", "tool"]
    sampled = list(first["prompt_ids"]) + list(first["response_ids"])
    assert list(second["prompt_ids"][:len(sampled)]) == sampled


def test_thinking_tokens_are_counted_apart_in_responses_and_gemini_usage(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    sdk = openai.OpenAI(base_url=f"{ref_stack.settings.proxy_url}/s/{key}/v1", api_key=key, max_retries=0)
    answered = sdk.responses.create(model="sdk-think", input="6*7?")
    with sdk.responses.stream(model="sdk-think", input="6*7?") as stream:
        streamed = stream.get_final_response()
    gemini = genai.Client(api_key=key, http_options=gt.HttpOptions(
        base_url=f"{ref_stack.settings.proxy_url}/s/{key}", retry_options=gt.HttpRetryOptions(attempts=1)))
    usage = gemini.models.generate_content(model="sdk-think", contents="6*7?").usage_metadata
    recs = records(ref_stack, key)
    thinking = [r["response_tokens"].index("</think>") + 1 for r in recs]  # as the tokenizer split the turn
    assert thinking[0] > 1 and len(set(thinking)) == 1
    for response, rec in zip((answered, streamed), recs):
        assert response.usage.output_tokens_details.reasoning_tokens == thinking[0]
        assert response.usage.output_tokens == len(rec["response_ids"])
    assert usage.thoughts_token_count == thinking[0]
    assert usage.candidates_token_count + usage.thoughts_token_count == len(recs[2]["response_ids"])
    assert usage.total_token_count == usage.prompt_token_count + len(recs[2]["response_ids"])


@pytest.mark.parametrize("body", [
    {"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image", "source": "x"}]}]},
    {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f", "input_schema": {}}],
     "tool_choice": {"type": "tool", "name": ["f"]}},
])
def test_a_malformed_anthropic_count_is_the_clients_400(ref_stack, body):
    key = running_session(ref_stack.settings.redis_url)
    resp = httpx.post(f"{ref_stack.settings.proxy_url}/s/{key}/v1/messages/count_tokens", json=body, timeout=30)
    assert resp.status_code == 400, resp.text
    assert resp.json()["type"] == "error" and resp.json()["error"]["type"] == "invalid_request_error"


def test_a_malformed_responses_count_is_the_clients_400(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    sdk = openai.OpenAI(base_url=f"{ref_stack.settings.proxy_url}/s/{key}/v1", api_key=key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.input_tokens.count(model="tiny", input="hi",
                                         tools=[{"type": "namespace", "name": "n", "tools": 5}])  # type: ignore[list-item]
    assert info.value.body["type"] == "invalid_request_error"


def test_anthropic_structured_output_reaches_the_engine(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    anthropic_client(ref_stack, key).messages.create(
        model="tiny", max_tokens=8, messages=[{"role": "user", "content": "A city?"}],
        output_config={"format": {"type": "json_schema", "schema": schema}})
    req = records(ref_stack, key)[-1]["normalized_request"]
    assert req["response_format"] == {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}


def test_count_tokens_counts_the_prompt_the_call_samples_claude_codes_billing_header_included(ref_stack):
    """Claude Code's system prompt starts with a billing-header line the proxy scrubs before
    sampling (a noise rule: it changes every call); its count_tokens request gets the same scrub,
    so the count is the call's usage.input_tokens (the recorded prompt ids)."""
    key = running_session(ref_stack.settings.redis_url)
    system = ("x-anthropic-billing-header: cc_version=2.0.1; cc_entrypoint=cli; cch=abcdef1234;\n"
              "You are Claude Code.")
    ask = {"model": "tiny", "system": system, "messages": [{"role": "user", "content": "hi"}]}
    client = anthropic_client(ref_stack, key)
    counted = client.messages.count_tokens(**ask).input_tokens
    used = client.messages.create(max_tokens=2, **ask).usage.input_tokens
    assert counted == used == len(records(ref_stack, key)[-1]["prompt_ids"])


def _seq(stack, key: str) -> int:
    return int(redis.Redis.from_url(stack.settings.redis_url).hget(keys.session(sid_of(key)), "seq") or 0)


PREWARM = {"model": "tiny", "system": [{"type": "text", "text": "You are a coding agent. " * 20,
                                        "cache_control": {"type": "ephemeral"}}],
           "messages": [{"role": "user", "content": "Fix the failing test."}]}


def test_an_anthropic_cache_prewarm_is_answered_with_its_count_and_samples_nothing(ref_stack):
    """``max_tokens: 0`` is Anthropic's documented prompt-cache pre-warm: an empty message
    (stop_reason max_tokens) whose usage counts the prompt. Nothing is sampled, admitted or
    recorded: the session's next real call is still its call 1."""
    key = running_session(ref_stack.settings.redis_url)
    client = anthropic_client(ref_stack, key)
    warm = client.messages.create(max_tokens=0, **PREWARM)
    assert warm.content == [] and warm.stop_reason == "max_tokens" and warm.usage.output_tokens == 0
    assert warm.id.startswith("msg_") and warm.model == "tiny"
    assert records(ref_stack, key) == [] and _seq(ref_stack, key) == 0
    used = client.messages.create(max_tokens=2, **PREWARM)
    assert warm.usage.input_tokens == used.usage.input_tokens == len(records(ref_stack, key)[-1]["prompt_ids"])
    assert [r["seq"] for r in records(ref_stack, key)] == [1]

    # gzip-compressed, as a client may send it: still a pre-warm
    raw = gzip.compress(json.dumps({**PREWARM, "max_tokens": 0}).encode())
    answer = httpx.post(f"{ref_stack.settings.proxy_url}/s/{key}/v1/messages", content=raw,
                        headers={"content-type": "application/json", "content-encoding": "gzip",
                                 "anthropic-version": "2023-06-01"})
    assert answer.status_code == 200 and answer.json()["content"] == [], answer.text
    assert _seq(ref_stack, key) == 1


@pytest.mark.parametrize("extra, param", [
    ({"stream": True}, "stream"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
    ({"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}, "output_config.format"),
])
def test_what_a_prewarm_cannot_be_combined_with_is_the_clients_400(ref_stack, extra, param):
    key = running_session(ref_stack.settings.redis_url)
    answer = httpx.post(f"{ref_stack.settings.proxy_url}/s/{key}/v1/messages",
                        json={**PREWARM, "max_tokens": 0, **extra}, headers={"anthropic-version": "2023-06-01"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["type"] == "error" and answer.json()["error"]["type"] == "invalid_request_error"
    assert "pre-warm" in answer.json()["error"]["message"] and param.split(".")[0] in answer.json()["error"]["message"]
    assert records(ref_stack, key) == []


def test_a_prewarm_is_authenticated_as_any_call_and_a_zero_in_a_tool_input_is_no_prewarm(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    for wrong in (key[:-4] + "0000", "sk-polar-sess-0000-" + "0" * 48):  # refused as a sampled call would be
        with pytest.raises(anthropic.APIStatusError) as warm:
            anthropic_client(ref_stack, wrong).messages.create(max_tokens=0, **PREWARM)
        with pytest.raises(anthropic.APIStatusError) as call:
            anthropic_client(ref_stack, wrong).messages.create(max_tokens=2, **PREWARM)
        assert warm.value.status_code == call.value.status_code in (401, 404)
        assert warm.value.body["error"] == call.value.body["error"]
    history = [{"role": "user", "content": "Call it."},
               {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "configure",
                                                  "input": {"max_tokens": 0}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}]
    reply = anthropic_client(ref_stack, key).messages.create(model="tiny", max_tokens=3, messages=history)
    assert reply.usage.output_tokens > 0 and len(records(ref_stack, key)) == 1  # sampled and recorded


@pytest.mark.parametrize("tool", [{"type": "local_shell"}, {"type": "shell"}, {"type": "apply_patch"},
                                  {"type": "computer_use_preview", "display_width": 800, "display_height": 600,
                                   "environment": "linux"}], ids=lambda t: t["type"])
def test_a_responses_builtin_tool_the_client_runs_is_refused_not_dropped(ref_stack, tool):
    """local_shell, shell, apply_patch and computer use are the harness's own tools (it runs the
    calls): dropped like a hosted tool, the policy never saw them and the agent could not act."""
    key = running_session(ref_stack.settings.redis_url)
    sdk = openai.OpenAI(base_url=f"{ref_stack.settings.proxy_url}/s/{key}/v1", api_key=key, max_retries=0)
    function = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.create(model="tiny", input="List the files.", max_output_tokens=2, tools=[function, tool])
    assert info.value.body["param"] == "tools[1].type" and info.value.body["code"] == "unsupported_feature"
    assert tool["type"] in info.value.body["message"] and records(ref_stack, key) == []
    hosted = sdk.responses.create(model="tiny", input="hi", max_output_tokens=2, tools=[{"type": "web_search"}])
    assert hosted.status == "incomplete" and len(records(ref_stack, key)) == 1  # a hosted one is still dropped


def test_a_chat_prefill_with_vllms_flags_continues_the_last_message(ref_stack):
    """vLLM's ``continue_final_message`` / ``add_generation_prompt`` (an assistant prefill, sent
    through the OpenAI SDK's extra_body) reach the engine: the prompt is the one Anthropic's
    prefill samples from, not the prefill closed and a new turn opened."""
    key = running_session(ref_stack.settings.redis_url)
    prefill = [{"role": "user", "content": "Write code"}, {"role": "assistant", "content": "def add(a, b):"}]
    sdk = openai.OpenAI(base_url=f"{ref_stack.settings.proxy_url}/s/{key}/v1", api_key=key, max_retries=0)
    sdk.chat.completions.create(model="tiny", max_tokens=2, messages=prefill,
                                extra_body={"continue_final_message": True, "add_generation_prompt": False})
    anthropic_client(ref_stack, key).messages.create(model="tiny", max_tokens=2, messages=prefill)
    chat, claude = records(ref_stack, key)
    assert chat["normalized_request"]["continue_final_message"] is True
    assert chat["prompt_ids"] == claude["prompt_ids"]
    for bad, status in (({"continue_final_message": True}, 400), ({"add_generation_prompt": "no"}, 400)):
        with pytest.raises(openai.BadRequestError) as info:  # both true (the engine's rule); not a boolean
            sdk.chat.completions.create(model="tiny", max_tokens=2, messages=prefill, extra_body=bad)
        assert info.value.status_code == status and info.value.body["type"] == "invalid_request_error"
    assert len(records(ref_stack, key)) == 2
