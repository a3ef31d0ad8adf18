"""Anthropic and google-genai SDK calls beyond the usual ones, through the official SDKs and the
reference model: history the vendor refuses (a tool_use left unanswered), and content the
translation must neither drop nor sample without (a document's title and context, the parts of
a Gemini function response, code-execution parts of a model turn)."""

from __future__ import annotations

import anthropic
import pytest
from transformers import AutoTokenizer

from tests.proxy.test_sdks import records
from tests.support import running_session

LS = {"name": "ls", "description": "List files", "input_schema": {"type": "object", "properties": {}}}


def anthropic_client(stack, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"{stack.settings.proxy_url}/s/{key}", api_key=key, max_retries=0)


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
