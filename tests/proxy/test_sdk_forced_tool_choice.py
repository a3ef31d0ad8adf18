"""A tool choice that forces a call ("required", "any", Gemini's ANY, a named tool) when the
request has no tool to call: through each vendor's SDK it is that vendor's 400, naming the tool
choice, and nothing is sampled -- never a text answer as if the call had not been forced. A
choice that forces nothing is still served without tools."""

from __future__ import annotations

import anthropic
import openai
import pytest
from google import genai
from google.genai import types as gt

from tests.proxy.test_sdks import records
from tests.support import running_session

QUESTION = "What is the weather in Paris?"


def openai_client(stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.settings.proxy_url}/s/{key}/v1", api_key=key, max_retries=0)


def chat(stack, key: str, choice) -> None:
    openai_client(stack, key).chat.completions.create(
        model="sdk-tools", max_tokens=8, messages=[{"role": "user", "content": QUESTION}], tools=[], tool_choice=choice)


def messages(stack, key: str, choice) -> None:
    anthropic.Anthropic(base_url=f"{stack.settings.proxy_url}/s/{key}", api_key=key, max_retries=0).messages.create(
        model="sdk-tools", max_tokens=8, messages=[{"role": "user", "content": QUESTION}], tool_choice=choice)


def responses(stack, key: str, choice) -> None:
    openai_client(stack, key).responses.create(model="sdk-tools", max_output_tokens=16, input=QUESTION,
                                               tool_choice=choice)


def gemini(stack, key: str, mode) -> None:
    sdk = genai.Client(api_key=key, http_options=gt.HttpOptions(
        base_url=f"{stack.settings.proxy_url}/s/{key}", retry_options=gt.HttpRetryOptions(attempts=1)))
    sdk.models.generate_content(model="sdk-tools", contents=QUESTION, config=gt.GenerateContentConfig(
        max_output_tokens=8, tool_config=gt.ToolConfig(function_calling_config=gt.FunctionCallingConfig(mode=mode))))


ERRORS = (openai.BadRequestError, anthropic.BadRequestError, genai.errors.ClientError)


@pytest.mark.parametrize("call, choice", [
    (chat, "required"),
    (chat, {"type": "function", "function": {"name": "get_weather"}}),
    (messages, {"type": "any"}),
    (responses, "required"),
    (gemini, "ANY"),
], ids=["chat-required", "chat-named", "anthropic-any", "responses-required", "gemini-any"])
def test_a_forced_tool_call_with_no_tools_is_refused(ref_stack, call, choice):
    key = running_session(ref_stack.settings.redis_url)
    with pytest.raises(ERRORS) as info:
        call(ref_stack, key, choice)
    err = info.value
    assert getattr(err, "status_code", getattr(err, "code", None)) == 400
    assert "tool" in str(err).lower() or "function" in str(err).lower()
    assert records(ref_stack, key) == []  # nothing sampled, nothing recorded


@pytest.mark.parametrize("call, choice", [(chat, "auto"), (chat, "none"), (messages, {"type": "auto"}),
                                          (responses, "none"), (gemini, "NONE")],
                         ids=["chat-auto", "chat-none", "anthropic-auto", "responses-none", "gemini-none"])
def test_a_tool_choice_forcing_nothing_is_served_without_tools(ref_stack, call, choice):
    key = running_session(ref_stack.settings.redis_url)
    call(ref_stack, key, choice)
    rec = records(ref_stack, key)[-1]
    assert rec["response_ids"] and "tools" not in rec["normalized_request"]


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize("mode", ["auto", "required"])
def test_a_chat_allowed_tools_choice_is_served_with_the_allowed_tools(ref_stack, mode):
    # OpenAI's allowed_tools choice (the SDK's ChatCompletionAllowedToolChoiceParam): the engine
    # knows none/auto/required/named only, so it gets the allowed tools and the mode.
    key = running_session(ref_stack.settings.redis_url)
    choice = {"type": "allowed_tools", "allowed_tools": {
        "mode": mode, "tools": [{"type": "function", "function": {"name": "get_weather"}}]}}
    answer = openai_client(ref_stack, key).chat.completions.create(
        model="sdk-tools", messages=[{"role": "user", "content": "What is the weather in Paris and Rome?"}],
        tools=[WEATHER, CLOCK], tool_choice=choice)
    assert [c.function.name for c in answer.choices[0].message.tool_calls] == ["get_weather"] * 2
    req = records(ref_stack, key)[-1]["normalized_request"]
    assert [t["function"]["name"] for t in req["tools"]] == ["get_weather"] and req["tool_choice"] == mode
    with pytest.raises(openai.BadRequestError) as info:  # allowing none of the request's tools
        openai_client(ref_stack, key).chat.completions.create(
            model="sdk-tools", messages=[{"role": "user", "content": "hi"}], tools=[CLOCK], tool_choice=choice)
    assert info.value.body["param"] == "tool_choice.allowed_tools.tools"


@pytest.mark.parametrize("allowed, sent", [
    (None, ["get_weather", "get_time"]),
    (["get_weather"], ["get_weather"]),  # one allowed function: still not forced (ANY would name it)
])
def test_gemini_validated_mode_lets_the_model_answer_in_text(ref_stack, allowed, sent):
    # VALIDATED: "either function calls or natural language response" (google-genai's
    # FunctionCallingConfigMode); only ANY forces a call.
    key = running_session(ref_stack.settings.redis_url)
    sdk = genai.Client(api_key=key, http_options=gt.HttpOptions(
        base_url=f"{ref_stack.settings.proxy_url}/s/{key}", retry_options=gt.HttpRetryOptions(attempts=1)))
    declarations = [gt.FunctionDeclaration(name=t["function"]["name"], parameters_json_schema=t["function"]["parameters"])
                    for t in (WEATHER, CLOCK)]
    answer = sdk.models.generate_content(model="sdk-tools", contents="What is the weather in Paris and Rome?",
                                         config=gt.GenerateContentConfig(
        tools=[gt.Tool(function_declarations=declarations)],
        automatic_function_calling=gt.AutomaticFunctionCallingConfig(disable=True),
        tool_config=gt.ToolConfig(function_calling_config=gt.FunctionCallingConfig(
            mode="VALIDATED", allowed_function_names=allowed))))
    assert [c.name for c in answer.function_calls] == ["get_weather"] * 2
    req = records(ref_stack, key)[-1]["normalized_request"]
    assert req["tool_choice"] == "auto" and [t["function"]["name"] for t in req["tools"]] == sent
