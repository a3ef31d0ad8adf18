"""The Responses API's calls around a response, through the official SDK and the reference model:
``input_tokens.count`` measures exactly the prompt a ``create`` with the same input samples after
(also continuing a ``previous_response_id``), and ``delete`` removes a stored response, after
which neither ``retrieve`` nor a continuation finds it."""

from __future__ import annotations

import openai
import pytest

from tests.proxy.test_sdks import records
from tests.support import running_session

INSTRUCTIONS = "You are terse."


def client(stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.settings.proxy_url}/s/{key}/v1", api_key=key, max_retries=0)


def test_counted_input_tokens_are_the_prompt_the_answer_was_sampled_after(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    sdk = client(ref_stack, key)
    first_input = [{"role": "user", "content": "Name a colour."}]
    counted = sdk.responses.input_tokens.count(model="tiny", instructions=INSTRUCTIONS, input=first_input)
    assert counted.object == "response.input_tokens"
    first = sdk.responses.create(model="tiny", instructions=INSTRUCTIONS, input=first_input, max_output_tokens=6)

    follow = [{"role": "user", "content": "And another one?"}]
    counted_next = sdk.responses.input_tokens.count(model="tiny", instructions=INSTRUCTIONS, input=follow,
                                                    previous_response_id=first.id)
    sdk.responses.create(model="tiny", instructions=INSTRUCTIONS, input=follow, previous_response_id=first.id,
                         max_output_tokens=6)
    recs = records(ref_stack, key)
    assert [counted.input_tokens, counted_next.input_tokens] == [len(r["prompt_ids"]) for r in recs]
    assert counted_next.input_tokens > counted.input_tokens
    # previous_response_id alone (no new input) is a valid count, of the stored conversation,
    # and the model is optional
    alone = sdk.responses.input_tokens.count(previous_response_id=first.id)
    assert 0 < alone.input_tokens < counted_next.input_tokens


def test_a_deleted_response_is_gone(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    sdk = client(ref_stack, key)
    r = sdk.responses.create(model="tiny", input="Hi.", max_output_tokens=4)
    assert sdk.responses.retrieve(r.id).id == r.id
    assert sdk.responses.delete(r.id) is None  # the SDK returns nothing for a delete
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.delete(r.id)
    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.create(model="tiny", input="Again.", previous_response_id=r.id, max_output_tokens=4)
    assert info.value.code == "previous_response_not_found"


def test_another_sessions_response_cannot_be_deleted(ref_stack):
    url = ref_stack.settings.redis_url
    owner, other = running_session(url), running_session(url)
    r = client(ref_stack, owner).responses.create(model="tiny", input="Hi.", max_output_tokens=4)
    with pytest.raises(openai.NotFoundError):
        client(ref_stack, other).responses.delete(r.id)
    assert client(ref_stack, owner).responses.retrieve(r.id).id == r.id
