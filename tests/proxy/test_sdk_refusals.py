"""What the vendors' APIs refuse with a 400 is refused here too, in each API's own error shape,
through the official SDKs and the reference model (nothing reaches the engine)."""

from __future__ import annotations

import anthropic
import openai
import pytest
from google import genai
from google.genai import types as gt
from transformers import AutoTokenizer

from proxy.providers.tool_errors import TOOL_ERROR
from tests.proxy.test_sdks import records
from tests.support import running_session


def openai_client(stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.settings.proxy_url}/s/{key}/v1", api_key=key, max_retries=0)


def answered(stack, key: str) -> list[dict]:
    return [r for r in records(stack, key) if r.get("response_ids")]


CALL = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}


@pytest.mark.parametrize("history", [
    [],  # no call at all
    [{"role": "assistant", "content": None, "tool_calls": [CALL]}],  # a call of another id
])
def test_a_chat_tool_message_answering_no_call_is_refused(ref_stack, history):
    key = running_session(ref_stack.settings.redis_url)
    sdk = openai_client(ref_stack, key)
    messages = [{"role": "user", "content": "List the files."}, *history,
                {"role": "tool", "tool_call_id": "call_9", "content": "a.py"}]
    with pytest.raises(openai.BadRequestError) as info:
        sdk.chat.completions.create(model="tiny", max_tokens=4, messages=messages)
    assert info.value.body["param"] == f"messages[{len(messages) - 1}].tool_call_id"
    assert "preceding message with 'tool_calls'" in info.value.message
    sdk.chat.completions.create(model="tiny", max_tokens=4, messages=[  # answering its call, it is taken
        messages[0], {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py"}])
    assert len(answered(ref_stack, key)) == 1


def anthropic_client(stack, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"{stack.settings.proxy_url}/s/{key}", api_key=key, max_retries=0)


def test_anthropic_stop_sequences_as_one_string_are_refused(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    with pytest.raises(anthropic.BadRequestError) as info:
        anthropic_client(ref_stack, key).messages.create(
            model="tiny", max_tokens=4, messages=[{"role": "user", "content": "hi"}], stop_sequences="END")
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert "stop_sequences" in info.value.message and answered(ref_stack, key) == []


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "ls"}])
@pytest.mark.parametrize("thinking", [{"type": "enabled", "budget_tokens": 1024}, {"type": "adaptive"}])
def test_anthropic_thinking_with_a_forced_tool_choice_is_refused(ref_stack, choice, thinking):
    """Anthropic refuses thinking together with a tool_choice that forces a tool; the proxy
    answered such a call (sampled with thinking on) where the vendor's API would not."""
    key = running_session(ref_stack.settings.redis_url)
    tools = [{"name": "ls", "description": "List files.", "input_schema": {"type": "object", "properties": {}}}]
    with pytest.raises(anthropic.BadRequestError) as info:
        anthropic_client(ref_stack, key).messages.create(
            model="tiny", max_tokens=2048, messages=[{"role": "user", "content": "hi"}], tools=tools,
            tool_choice=choice, thinking=thinking)
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert info.value.body["error"]["message"] == "Thinking may not be enabled when tool_choice forces tool use."
    assert answered(ref_stack, key) == []


def test_an_anthropic_tool_result_marked_as_an_error_reaches_the_prompt(ref_stack, model_dir):
    key = running_session(ref_stack.settings.redis_url)
    sdk = anthropic_client(ref_stack, key)
    use = {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}
    tools = [{"name": "ls", "description": "List files", "input_schema": {"type": "object"}}]
    for failed in (False, True):
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "No such directory",
                  **({"is_error": True} if failed else {})}
        sdk.messages.create(model="tiny", max_tokens=4, tools=tools, messages=[
            {"role": "user", "content": "List the files."}, {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]}])
    ok, failed_call = answered(ref_stack, key)
    assert ok["prompt_ids"] != failed_call["prompt_ids"]
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    assert TOOL_ERROR not in tok.decode(ok["prompt_ids"])
    assert f"{TOOL_ERROR}\nNo such directory" in tok.decode(failed_call["prompt_ids"])


def genai_client(stack, key: str, **options) -> genai.Client:
    return genai.Client(api_key=key, http_options=gt.HttpOptions(
        base_url=f"{stack.settings.proxy_url}/s/{key}", retry_options=gt.HttpRetryOptions(attempts=1), **options))


def test_a_gemini_function_response_with_an_error_reaches_the_prompt_marked(ref_stack, model_dir):
    key = running_session(ref_stack.settings.redis_url)
    sdk = genai_client(ref_stack, key)
    call = gt.Part(function_call=gt.FunctionCall(name="ls", args={}))
    for response in ({"output": "No such directory"}, {"error": "No such directory"}):  # gemini-cli's two shapes
        sdk.models.generate_content(model="tiny", config=gt.GenerateContentConfig(max_output_tokens=4), contents=[
            gt.Content(role="user", parts=[gt.Part(text="List the files.")]), gt.Content(role="model", parts=[call]),
            gt.Content(role="user", parts=[gt.Part(function_response=gt.FunctionResponse(name="ls", response=response))])])
    ok, failed_call = answered(ref_stack, key)
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    assert TOOL_ERROR not in tok.decode(ok["prompt_ids"])
    assert f"{TOOL_ERROR}\nNo such directory" in tok.decode(failed_call["prompt_ids"])


@pytest.mark.parametrize("history", [
    [],  # no call at all
    [gt.Content(role="model", parts=[gt.Part(function_call=gt.FunctionCall(name="read", args={}))])],  # another's
    [gt.Content(role="model", parts=[gt.Part(function_call=gt.FunctionCall(name="ls", args={}))]),
     gt.Content(role="user", parts=[gt.Part(function_response=gt.FunctionResponse(name="ls", response={"output": "a"}))])],
])
def test_a_gemini_function_response_answering_no_call_is_refused_as_google_does(ref_stack, history):
    key = running_session(ref_stack.settings.redis_url)
    sdk = genai_client(ref_stack, key)
    orphan = gt.Content(role="user", parts=[gt.Part(function_response=gt.FunctionResponse(
        name="ls", response={"output": "a.py"}))])
    contents = [gt.Content(role="user", parts=[gt.Part(text="List the files.")]), *history, orphan]
    with pytest.raises(genai.errors.ClientError) as info:
        sdk.models.generate_content(model="tiny", config=gt.GenerateContentConfig(max_output_tokens=4),
                                    contents=contents)
    assert info.value.code == 400 and info.value.status == "INVALID_ARGUMENT"
    assert info.value.message == "Please ensure that function response turn comes immediately after a function call turn."
    assert answered(ref_stack, key) == []
    # the same history with the response answering its call is sampled
    answer = contents[:-1] + [gt.Content(role="model", parts=[gt.Part(function_call=gt.FunctionCall(name="ls", args={}))]),
                              orphan]
    sdk.models.generate_content(model="tiny", config=gt.GenerateContentConfig(max_output_tokens=4), contents=answer)
    assert len(answered(ref_stack, key)) == 1


def test_an_unknown_gemini_generation_config_field_is_refused_as_google_does(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    # what the SDK's config sends as generationConfig still passes (gemini-cli's fields among them)
    config = gt.GenerateContentConfig(
        temperature=1, top_p=0.95, top_k=64, max_output_tokens=4, stop_sequences=["END"], seed=3,
        presence_penalty=0.0, frequency_penalty=0.0, candidate_count=1, response_logprobs=True, logprobs=2,
        response_mime_type="text/plain", thinking_config=gt.ThinkingConfig(include_thoughts=True),
        media_resolution=gt.MediaResolution.MEDIA_RESOLUTION_LOW)
    plain = genai_client(ref_stack, key)  # (kept: a client collected mid-call is closed)
    plain.models.generate_content(model="tiny", contents="hi", config=config)
    assert len(answered(ref_stack, key)) == 1
    sdk = genai_client(ref_stack, key, extra_body={"generationConfig": {"topk": 3}})  # misspelt
    with pytest.raises(genai.errors.ClientError) as info:
        sdk.models.generate_content(model="tiny", contents="hi", config=gt.GenerateContentConfig(max_output_tokens=4))
    assert info.value.code == 400 and info.value.status == "INVALID_ARGUMENT"
    assert info.value.message == ('Invalid JSON payload received. Unknown name "topk" at \'generation_config\': '
                                  "Cannot find field.")
    assert len(answered(ref_stack, key)) == 1


@pytest.mark.parametrize("extra, code, param", [
    ({"reasoning": {"effort": "maximal"}}, "invalid_value", "reasoning.effort"),
    ({"tools": [{"type": "mcp", "server_label": "fs", "server_url": "https://example.com/mcp",
                 "require_approval": "never"}]}, "unsupported_feature", "tools[0].type"),
])
def test_what_a_responses_call_asks_for_and_cannot_get_is_refused(ref_stack, extra, code, param):
    key = running_session(ref_stack.settings.redis_url)
    sdk = openai_client(ref_stack, key)
    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.create(model="tiny", input="hi", max_output_tokens=16, **extra)
    assert (info.value.code, info.value.param) == (code, param)
    assert answered(ref_stack, key) == []
    sdk.responses.create(model="tiny", input="hi", max_output_tokens=16, truncation="auto",
                         reasoning={"effort": "low"}, tools=[{"type": "web_search"}])  # taken
    assert len(answered(ref_stack, key)) == 1


def test_a_sampling_value_vllm_refuses_is_refused_by_the_reference_engine_through_the_proxy(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    with pytest.raises(openai.BadRequestError) as info:
        openai_client(ref_stack, key).chat.completions.create(
            model="tiny", max_tokens=4, messages=[{"role": "user", "content": "hi"}], presence_penalty=2.5)
    assert "presence_penalty must be in [-2, 2]" in info.value.message and answered(ref_stack, key) == []


def test_a_chat_reasoning_effort_outside_openais_set_is_refused(ref_stack):
    """Chat's ``reasoning_effort`` was passed on unchecked: "maximal" reached the engine, which
    read it as nothing (the reference server, vLLM for most templates) and sampled anyway."""
    key = running_session(ref_stack.settings.redis_url)
    sdk = openai_client(ref_stack, key)
    messages = [{"role": "user", "content": "hi"}]
    for effort, code in (("maximal", "invalid_value"), (3, "invalid_type")):
        with pytest.raises(openai.BadRequestError) as info:
            sdk.chat.completions.create(model="tiny", max_tokens=4, messages=messages, reasoning_effort=effort)
        assert (info.value.param, info.value.code) == ("reasoning_effort", code)
    assert answered(ref_stack, key) == []
    sdk.chat.completions.create(model="tiny", max_tokens=4, messages=messages, reasoning_effort="low")  # taken
    assert len(answered(ref_stack, key)) == 1


def test_a_responses_function_call_output_answering_no_call_is_refused(ref_stack):
    """OpenAI's 400 (Chat's tool message answering no call is refused too): it was sent on as a
    tool message for a call the model never made, and the engine sampled from that prompt."""
    key = running_session(ref_stack.settings.redis_url)
    sdk = openai_client(ref_stack, key)
    call = {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "call_9", "output": "a.py"}
    for history in ([], [call]):  # no call at all; a call of another id
        with pytest.raises(openai.BadRequestError) as info:
            sdk.responses.create(model="tiny", max_output_tokens=4,
                                 input=[{"role": "user", "content": "List the files."}, *history, output])
        assert info.value.param == "input"
        assert info.value.body["message"] == "No tool call found for function call output with call_id call_9."
    assert answered(ref_stack, key) == []
    first = sdk.responses.create(model="tiny", max_output_tokens=4,  # answering its call, it is taken
                                 input=[{"role": "user", "content": "List the files."}, call,
                                        {**output, "call_id": "call_1"}])
    # ... and so is the answer to a call of the stored conversation it continues
    stored = sdk.responses.create(model="tiny", max_output_tokens=4, previous_response_id=first.id,
                                  input=[{"role": "user", "content": "Again."}, {**call, "call_id": "call_2"}])
    sdk.responses.create(model="tiny", max_output_tokens=4, previous_response_id=stored.id,
                         input=[{**output, "call_id": "call_2"}])
    assert len(answered(ref_stack, key)) == 3


@pytest.mark.parametrize("config, param", [
    (gt.GenerateContentConfig(response_modalities=["IMAGE"]), "generationConfig.responseModalities"),
    (gt.GenerateContentConfig(response_modalities=["TEXT", "AUDIO"]), "generationConfig.responseModalities"),
    (gt.GenerateContentConfig(speech_config=gt.SpeechConfig(voice_config=gt.VoiceConfig(
        prebuilt_voice_config=gt.PrebuiltVoiceConfig(voice_name="Kore")))), "generationConfig.speechConfig"),
])
def test_gemini_image_or_audio_output_is_refused_not_answered_in_text(ref_stack, config, param):
    """Asked for an image or speech, the caller got text (as Chat's ``modalities: ["audio"]`` is
    refused): the model answers in text only."""
    key = running_session(ref_stack.settings.redis_url)
    sdk = genai_client(ref_stack, key)
    config.max_output_tokens = 4
    with pytest.raises(genai.errors.ClientError) as info:
        sdk.models.generate_content(model="tiny", contents="Draw a cat.", config=config)
    assert info.value.code == 400 and info.value.status == "INVALID_ARGUMENT"
    assert "this model answers in text" in info.value.message
    assert answered(ref_stack, key) == []
    sdk.models.generate_content(model="tiny", contents="hi", config=gt.GenerateContentConfig(
        max_output_tokens=4, response_modalities=["TEXT"]))  # text: taken
    assert len(answered(ref_stack, key)) == 1
