"""Asks the proxy cannot honour, through the official SDKs: refused in the API's own shape, naming
the field, with nothing sampled -- never answered as if not asked. The engines' own Chat extras
sent through ``extra_body`` that change what is sampled (guided decoding) or what is answered
(token ids, prompt logprobs, an echoed prompt), which are neither passed on nor answered (null or
false still asks for nothing); and a Gemini response schema without the JSON MIME type it needs."""

from __future__ import annotations

import openai
import pytest
from google import genai
from google.genai import types as gt

from tests.proxy.test_sdks import records
from tests.support import running_session

ASK = {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


def openai_client(stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.settings.proxy_url}/s/{key}/v1", api_key=key, max_retries=0)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("extra", [
    {"return_token_ids": True},  # what RL clients of vLLM ask for: the ids would silently be missing
    {"return_tokens_as_token_ids": True},
    {"prompt_logprobs": 0},
    {"echo": True},
    {"guided_json": {"type": "object"}},  # the answer would be unconstrained text
    {"guided_choice": ["yes", "no"]},
    {"structured_outputs": {"json": {"type": "object"}}},
    {"use_beam_search": True},  # not what the policy sampled
    {"best_of": 2},
], ids=lambda extra: next(iter(extra)))
def test_an_engine_extra_the_answer_would_lack_is_refused(ref_stack, extra, stream):
    key = running_session(ref_stack.settings.redis_url)
    with pytest.raises(openai.BadRequestError) as info:
        openai_client(ref_stack, key).chat.completions.create(**ASK, stream=stream, extra_body=extra)
    field = next(iter(extra))
    assert info.value.body["param"] == field and f"'{field}'" in info.value.message
    assert info.value.body["code"] == "unsupported_feature"
    assert records(ref_stack, key) == []  # nothing sampled, nothing recorded


def test_an_engine_extra_asking_for_nothing_is_served(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    extra = {"return_token_ids": False, "echo": False, "guided_json": None, "prompt_logprobs": None,
             "use_beam_search": False, "best_of": 1}
    answer = openai_client(ref_stack, key).chat.completions.create(**ASK, extra_body=extra)
    assert answer.choices[0].finish_reason == "length"
    rec = records(ref_stack, key)[-1]
    assert len(rec["response_ids"]) == answer.usage.completion_tokens == 4


@pytest.mark.parametrize("config", [
    {"response_json_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
    {"response_schema": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}}, "response_mime_type": "text/plain"},
], ids=["json-schema-no-mime", "schema-text-plain"])
def test_a_gemini_response_schema_without_the_json_mime_type_is_refused(ref_stack, config):
    key = running_session(ref_stack.settings.redis_url)
    sdk = genai.Client(api_key=key, http_options=gt.HttpOptions(
        base_url=f"{ref_stack.settings.proxy_url}/s/{key}", retry_options=gt.HttpRetryOptions(attempts=1)))
    with pytest.raises(genai.errors.ClientError) as info:
        sdk.models.generate_content(model="tiny", contents="A city?",
                                    config=gt.GenerateContentConfig(max_output_tokens=4, **config))
    assert info.value.code == 400 and "responseMimeType" in str(info.value)
    assert records(ref_stack, key) == []
    sdk.models.generate_content(model="tiny", contents="A city?", config=gt.GenerateContentConfig(  # with it: taken
        max_output_tokens=4, response_mime_type="application/json", **{k: v for k, v in config.items()
                                                                        if k != "response_mime_type"}))
    assert records(ref_stack, key)[-1]["normalized_request"]["response_format"]["type"] == "json_schema"
