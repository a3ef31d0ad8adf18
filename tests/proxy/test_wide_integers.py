"""A model that emits an integer beyond 64 bits in a tool call's arguments (a policy in RL
writes whatever it likes): the Anthropic and Gemini SDKs get the call with the integer exact,
streamed or not (orjson refuses to write it: the harness got a 502), and when the harness sends
the call back, the next prompt renders it as the model wrote it (orjson read it as a rounded
float: the prompt drifted from the sampled ids)."""

from __future__ import annotations

import anthropic
import openai
import pytest
import redis
from google import genai
from google.genai import types as gt

from pipeline.stores.records import RecordStore
from tests.proxy.test_sdks import records
from tests.support import running_session, sid_of

WIDE = 123456789012345678901234567890  # what tests/fixtures/sdk_bigint_policy.json's first turn emits
ASK = [{"role": "user", "content": "record it"}]
TOOL = {"name": "record", "description": "Record an id.",
        "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}, "n": {"type": "integer"}}}}


def assert_sent_back_as_sampled(stack, key):
    first, second = [r for r in records(stack, key) if r.get("response_ids")]
    sampled = list(first["prompt_ids"]) + list(first["response_ids"])
    assert list(second["prompt_ids"])[:len(sampled)] == sampled  # no drift: the call re-renders as sampled
    call = second["normalized_request"]["messages"][1]["tool_calls"][0]
    assert str(WIDE) in call["function"]["arguments"]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tool_input_with_a_wide_integer_round_trips_exactly(ref_stack, stream):
    key = running_session(ref_stack.settings.redis_url)
    sdk = anthropic.Anthropic(base_url=f"{ref_stack.settings.proxy_url}/s/{key}", api_key=key, max_retries=0)
    if stream:
        with sdk.messages.stream(model="sdk-bigint", max_tokens=300, messages=ASK, tools=[TOOL]) as events:
            message = events.get_final_message()
    else:
        message = sdk.messages.create(model="sdk-bigint", max_tokens=300, messages=ASK, tools=[TOOL])
    use = message.content[-1]
    assert use.type == "tool_use" and use.input == {"id": WIDE, "n": 7}
    reply = sdk.messages.create(model="sdk-bigint", max_tokens=300, tools=[TOOL], messages=[
        *ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "ok"}]}])
    assert reply.content[-1].text == "Recorded."
    assert_sent_back_as_sampled(ref_stack, key)


def test_gemini_function_call_with_a_wide_integer_round_trips_exactly(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    client = genai.Client(api_key=key, http_options=gt.HttpOptions(base_url=f"{ref_stack.settings.proxy_url}/s/{key}"))
    tools = [gt.Tool(function_declarations=[gt.FunctionDeclaration(
        name="record", description="Record an id.", parameters_json_schema=TOOL["input_schema"])])]
    config = gt.GenerateContentConfig(tools=tools)
    first = client.models.generate_content(model="sdk-bigint", contents="record it", config=config)
    call = first.candidates[0].content.parts[0].function_call
    assert call.args == {"id": WIDE, "n": 7}
    history = [gt.Content(role="user", parts=[gt.Part(text="record it")]), first.candidates[0].content,
               gt.Content(role="user", parts=[gt.Part(function_response=gt.FunctionResponse(
                   id=call.id, name="record", response={"ok": True}))])]
    second = client.models.generate_content(model="sdk-bigint", contents=history, config=config)
    assert second.text == "Recorded."
    assert_sent_back_as_sampled(ref_stack, key)


BOUNDED = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 10**20}},
           "required": ["n"]}  # a tool schema's bound beyond 64 bits (pydantic's conint(le=10**20), say)


def test_a_call_whose_request_holds_a_wide_integer_is_recorded_readably(ref_stack):
    """The engine's request keeps the integer (it is no JSON_DOC then), so the record is packed
    with wide integers as text; that fallback walked the record's packed ids and JSON texts as
    tuples too, and every call of a harness with such a tool schema was stored unreadable: the
    client got its answer, the trainer nothing."""
    key = running_session(ref_stack.settings.redis_url)
    sdk = openai.OpenAI(base_url=f"{ref_stack.settings.proxy_url}/s/{key}/v1", api_key=key, max_retries=0)
    answer = sdk.chat.completions.create(
        model="tiny", max_tokens=3, messages=[{"role": "user", "content": "hi"}],
        tools=[{"type": "function", "function": {"name": "alloc", "parameters": BOUNDED}}])
    sdk.chat.completions.create(model="tiny", max_tokens=3, messages=[{"role": "user", "content": "hi"}],
                                seed=2**70)  # a seed beyond 64 bits, which the engine takes
    store = RecordStore(redis.Redis.from_url(ref_stack.settings.redis_url), 3600)
    recorded, unreadable = store.completions(sid_of(key))
    assert unreadable == 0 and len(recorded) == 2
    first = recorded[0]
    assert len(first.prompt_ids) == answer.usage.prompt_tokens and len(first.response_ids) == 3
    assert str(10**20) in str(first.normalized_request["tools"][0]["function"]["parameters"]["properties"]["n"])
