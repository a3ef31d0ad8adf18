"""The Responses API's calls around a response, through the official SDK and the reference model:
``input_tokens.count`` measures exactly the prompt a ``create`` with the same input samples after
(also continuing a ``previous_response_id``); ``delete`` removes a stored response, after which
neither ``retrieve`` nor a continuation (nor a reference to its items) finds it; ``input_items``
lists the context a response was generated from, paged as the SDK pages it; an ``item_reference``
renders exactly the prompt of the item sent inline; ``cancel`` is refused (nothing runs in the
background)."""

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
    with pytest.raises(openai.BadRequestError) as info:  # no background responses: nothing to replay
        list(sdk.responses.retrieve(r.id, stream=True))
    assert info.value.param == "stream" and "background=true" in info.value.message
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


def test_input_items_list_the_context_a_response_was_generated_from(ref_stack):
    sdk = client(ref_stack, running_session(ref_stack.settings.redis_url))
    first = sdk.responses.create(model="tiny", instructions=INSTRUCTIONS, max_output_tokens=6,
                                 input=[{"role": "user", "content": "Name a colour."}])
    second = sdk.responses.create(model="tiny", instructions=INSTRUCTIONS, previous_response_id=first.id,
                                  input="And another one?", max_output_tokens=6)
    asc = list(sdk.responses.input_items.list(second.id, order="asc"))
    # the first input, the first answer's items (their ids), the second input; instructions are no item
    assert [(i.type, getattr(i, "role", None)) for i in asc] == (
        [("message", "user")] + [(o.type, getattr(o, "role", None)) for o in first.output] + [("message", "user")])
    assert [i.id for i in asc[1:-1]] == [o.id for o in first.output]
    assert asc[0].content[0].text == "Name a colour." and asc[-1].content[0].text == "And another one?"
    assert len({i.id for i in asc}) == len(asc)
    # paged one item at a time, newest first (the default order), the SDK follows the cursor
    assert [i.id for i in sdk.responses.input_items.list(second.id, limit=1)] == [i.id for i in reversed(asc)]
    assert [i.id for i in sdk.responses.input_items.list(first.id)] == [asc[0].id]
    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.input_items.list(second.id, limit=0)
    assert info.value.body["param"] == "limit"
    with pytest.raises(openai.NotFoundError):
        sdk.responses.input_items.list("resp_unknown")


def test_an_item_reference_replays_a_stored_item_as_if_sent_inline(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    sdk = client(ref_stack, key)
    question = {"role": "user", "content": "Name a colour."}
    first = sdk.responses.create(model="tiny", input=[question], max_output_tokens=6)
    follow = {"role": "user", "content": "Another?"}
    inline = [question, *[o.model_dump(exclude_none=True) for o in first.output], follow]
    by_reference = [{"type": "item_reference", "id": question_id(sdk, first.id)},
                    *[{"type": "item_reference", "id": o.id} for o in first.output], follow]
    sdk.responses.create(model="tiny", input=inline, max_output_tokens=4, store=False)
    sdk.responses.create(model="tiny", input=by_reference, max_output_tokens=4, store=False)
    recs = records(ref_stack, key)
    assert recs[2]["prompt_ids"] == recs[1]["prompt_ids"] and len(recs[1]["prompt_ids"]) > len(recs[0]["prompt_ids"])

    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.create(model="tiny", input=[{"type": "item_reference", "id": "msg_nope"}, follow])
    assert "Item with id 'msg_nope' not found." in info.value.message
    other = client(ref_stack, running_session(ref_stack.settings.redis_url))
    with pytest.raises(openai.BadRequestError):  # another session's items are not this one's
        other.responses.create(model="tiny", input=by_reference)
    sdk.responses.delete(first.id)  # its items go with it
    with pytest.raises(openai.BadRequestError):
        sdk.responses.create(model="tiny", input=by_reference)


def question_id(sdk: openai.OpenAI, response_id: str) -> str:
    return next(iter(sdk.responses.input_items.list(response_id))).id


def test_a_completed_response_cannot_be_cancelled(ref_stack):
    sdk = client(ref_stack, running_session(ref_stack.settings.redis_url))
    r = sdk.responses.create(model="tiny", input="Hi.", max_output_tokens=4)
    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.cancel(r.id)
    assert "background" in info.value.message
    with pytest.raises(openai.NotFoundError):
        sdk.responses.cancel("resp_unknown")
    assert sdk.responses.retrieve(r.id).status == r.status  # untouched
