"""Anthropic and google-genai SDK calls beyond the usual ones, through the official SDKs and the
reference model: history the vendor refuses (a tool_use left unanswered), and content the
translation must neither drop nor sample without (a document's title and context, the parts of
a Gemini function response, code-execution parts of a model turn)."""

from __future__ import annotations

import base64

import anthropic
import pytest
from google import genai
from google.genai import types as gt
from transformers import AutoTokenizer

from proxy.providers.google_request import to_chat as gemini_to_chat
from tests.proxy.test_sdks import records
from tests.support import running_session

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
LS = {"name": "ls", "description": "List files", "input_schema": {"type": "object", "properties": {}}}


def anthropic_client(stack, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"{stack.settings.proxy_url}/s/{key}", api_key=key, max_retries=0)


def genai_client(stack, key: str) -> genai.Client:
    return genai.Client(api_key=key, http_options=gt.HttpOptions(
        base_url=f"{stack.settings.proxy_url}/s/{key}", retry_options=gt.HttpRetryOptions(attempts=1)))


@pytest.mark.parametrize("answer", [
    "What now?",  # plain text: the call is left unanswered
    [{"type": "text", "text": "What now?"}],
    [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"}],  # one of two answered
])
def test_an_anthropic_tool_use_without_its_tool_result_next_is_refused_as_anthropic_does(ref_stack, answer):
    key = running_session(ref_stack.settings.redis_url)
    sdk = anthropic_client(ref_stack, key)
    calls = [{"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}},
             {"type": "tool_use", "id": "toolu_2", "name": "ls", "input": {}}]
    history = [{"role": "user", "content": "List the files."}, {"role": "assistant", "content": calls}]
    with pytest.raises(anthropic.BadRequestError) as info:
        sdk.messages.create(model="tiny", max_tokens=4, tools=[LS], messages=[*history, {"role": "user", "content": answer}])
    assert info.value.body["type"] == "error" and info.value.body["error"]["type"] == "invalid_request_error"
    assert "`tool_use` ids were found without `tool_result` blocks immediately after" in info.value.message
    assert "toolu_2" in info.value.message
    assert records(ref_stack, key) == []  # nothing sampled on a history the vendor refuses
    # every call answered (extra text after the results is fine): sampled
    results = [{"type": "tool_result", "tool_use_id": c["id"], "content": "a.py"} for c in calls]
    sdk.messages.create(model="tiny", max_tokens=4, tools=[LS], messages=[
        *history, {"role": "user", "content": [*results, {"type": "text", "text": "Go on."}]}])
    assert len(records(ref_stack, key)) == 1


def test_an_anthropic_documents_title_and_context_reach_the_prompt(ref_stack, model_dir):
    key = running_session(ref_stack.settings.redis_url)
    doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "The sky is green."},
           "title": "Field notes 1887", "context": "Written by a colour-blind sailor."}
    anthropic_client(ref_stack, key).messages.create(model="tiny", max_tokens=4, messages=[
        {"role": "user", "content": [doc, {"type": "text", "text": "What colour is the sky?"}]}])
    prompt = AutoTokenizer.from_pretrained(model_dir, local_files_only=True).decode(records(ref_stack, key)[0]["prompt_ids"])
    for text in ("Field notes 1887", "Written by a colour-blind sailor.", "The sky is green.", "What colour is the sky?"):
        assert text in prompt


def _function_response_with_image() -> list[gt.Content]:
    return [gt.Content(role="user", parts=[gt.Part(text="Take a screenshot.")]),
            gt.Content(role="model", parts=[gt.Part(function_call=gt.FunctionCall(name="shot", args={}, id="c1"))]),
            gt.Content(role="user", parts=[gt.Part(function_response=gt.FunctionResponse(
                name="shot", id="c1", response={"output": "the screenshot"},
                parts=[gt.FunctionResponsePart(inline_data=gt.FunctionResponseBlob(mime_type="image/png", data=PNG))]))])]


def test_a_gemini_function_responses_image_parts_are_not_dropped(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    tool = gt.Tool(function_declarations=[gt.FunctionDeclaration(name="shot", description="Take a screenshot")])
    config = gt.GenerateContentConfig(tools=[tool], max_output_tokens=4)
    sdk = genai_client(ref_stack, key)  # (kept: a dropped client closes itself)
    with pytest.raises(genai.errors.ClientError) as info:  # the text-only engine cannot see the image
        sdk.models.generate_content(model="tiny", contents=_function_response_with_image(), config=config)
    assert info.value.code == 400 and info.value.status == "INVALID_ARGUMENT" and "multimodal" in info.value.message
    assert records(ref_stack, key) == []
    # translated as an Anthropic tool_result's images are: shown right after the tool message
    body = {"contents": [c.model_dump(mode="json", exclude_none=True) for c in _function_response_with_image()]}
    messages = gemini_to_chat(body, "tiny")[0]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]
    assert messages[2]["content"] == "the screenshot"
    assert messages[3]["content"] == [{"type": "image_url", "image_url": {
        "url": "data:image/png;base64," + base64.b64encode(PNG).decode()}}]


@pytest.mark.parametrize("part", [
    gt.Part(executable_code=gt.ExecutableCode(code="print(6*7)", language="PYTHON")),
    gt.Part(code_execution_result=gt.CodeExecutionResult(outcome="OUTCOME_OK", output="42")),
])
def test_a_gemini_model_turn_part_the_prompt_cannot_hold_is_refused_not_dropped(ref_stack, part):
    key = running_session(ref_stack.settings.redis_url)
    contents = [gt.Content(role="user", parts=[gt.Part(text="6*7?")]),
                gt.Content(role="model", parts=[gt.Part(text="Let me compute."), part]),
                gt.Content(role="user", parts=[gt.Part(text="And?")])]
    sdk = genai_client(ref_stack, key)
    with pytest.raises(genai.errors.ClientError) as info:
        sdk.models.generate_content(model="tiny", contents=contents, config=gt.GenerateContentConfig(max_output_tokens=4))
    assert info.value.code == 400 and "contents[1].parts[1]" in info.value.message
    assert records(ref_stack, key) == []


def test_a_gemini_inline_image_reaches_the_engine_in_standard_base64():
    # google-genai sends bytes URL-safe base64 encoded (as its JSON dump here does); vLLM decodes
    # a data URL's base64 strictly, so "-" and "_" must be the standard alphabet's "+" and "/".
    image = b"\xfb\xef\xbe\xff" + PNG
    part = gt.Part.from_bytes(data=image, mime_type="image/png").model_dump(mode="json", exclude_none=True)
    assert "-" in part["inline_data"]["data"] or "_" in part["inline_data"]["data"]
    body = {"contents": [{"role": "user", "parts": [{"text": "What is this?"}, part]}]}
    url = gemini_to_chat(body, "tiny")[0]["messages"][0]["content"][1]["image_url"]["url"]
    assert url == "data:image/png;base64," + base64.b64encode(image).decode()


@pytest.mark.parametrize("uri, mime", [("https://example.com/report.pdf", "application/pdf"),
                                       ("https://www.youtube.com/watch?v=abc", "video/mp4")])
def test_a_gemini_file_that_is_no_image_is_refused_as_such(ref_stack, uri, mime):
    # It was passed on as an image URL: the caller heard "not a multimodal model" from a text-only
    # engine, and a multimodal one would be asked to read a PDF or a video as a picture.
    key = running_session(ref_stack.settings.redis_url)
    sdk = genai_client(ref_stack, key)
    with pytest.raises(genai.errors.ClientError) as info:
        sdk.models.generate_content(model="tiny", contents=[gt.Part.from_uri(file_uri=uri, mime_type=mime), "Summarise."],
                                    config=gt.GenerateContentConfig(max_output_tokens=4))
    assert info.value.code == 400 and "only image" in info.value.message and "contents[0].parts[0]" in info.value.message
    assert records(ref_stack, key) == []
    body = {"contents": [{"parts": [{"fileData": {"fileUri": "https://example.com/cat.png", "mimeType": "image/png"}}]}]}
    assert gemini_to_chat(body, "tiny")[0]["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]
