"""The Responses API's stored items, without Redis or HTTP: ids given to a request's own input,
``item_reference`` resolution, the chain ``input_items`` lists, and its cursor pages."""

from __future__ import annotations

import pytest

from proxy.errors import BadRequest
from proxy.providers import openai_responses_items as items
from proxy.providers.openai_responses import to_chat


def test_own_input_gives_each_item_an_id_and_keeps_the_clients():
    own = items.own_input([{"role": "user", "content": "hi"},
                           {"type": "function_call_output", "call_id": "c1", "output": "ok", "id": "mine"},
                           {"type": "message", "role": "assistant", "content": "so"}])
    assert [i["type"] for i in own] == ["message", "function_call_output", "message"]
    assert own[0]["id"].startswith("msg_") and own[1]["id"] == "mine" and own[2]["id"].startswith("msg_")
    assert own[0]["content"] == [{"type": "input_text", "text": "hi"}]
    assert own[2]["content"] == [{"type": "output_text", "text": "so"}]
    assert len({i["id"] for i in own}) == 3
    assert items.own_input("just text")[0]["content"] == [{"type": "input_text", "text": "just text"}]


def test_a_reference_becomes_the_item_it_names_and_renders_as_if_sent_inline():
    stored = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "ls", "arguments": "{}"}
    inline = [{"role": "user", "content": "list"}, dict(stored),
              {"type": "function_call_output", "call_id": "call_1", "output": "a b"}]
    by_ref = [inline[0], {"type": "item_reference", "id": "fc_1"}, inline[2]]
    assert items.references(by_ref) == ["fc_1"]
    assert (to_chat({"model": "m", "input": by_ref}, referenced={"fc_1": stored})[0]
            == to_chat({"model": "m", "input": inline})[0])
    with pytest.raises(BadRequest, match="Item with id 'fc_1' not found"):
        to_chat({"model": "m", "input": by_ref}, referenced={})
    assert items.references("text") == [] and items.references([{"role": "user", "content": "x"}]) == []


def record(rid, prev, own, out):
    return {"response": {"id": rid, "previous_response_id": prev, "output": out}, "input": own}


def test_context_items_follow_the_chain_as_far_as_it_is_stored():
    store = {"r1": record("r1", None, [{"id": "a"}], [{"id": "b"}]),
             "r2": record("r2", "r1", [{"id": "c"}], [{"id": "d"}]),
             "r3": record("r3", "r2", [{"id": "e"}], [{"id": "f"}])}
    ids = [i["id"] for i in items.context_items(store["r3"], store.get)]
    assert ids == ["a", "b", "c", "d", "e"]  # its own output is not its input
    del store["r1"]
    assert [i["id"] for i in items.context_items(store["r3"], store.get)] == ["c", "d", "e"]
    loop = {"x": record("x", "y", [{"id": "1"}], []), "y": record("y", "x", [{"id": "2"}], [])}
    assert [i["id"] for i in items.context_items(loop["x"], loop.get)] == ["2", "1"]  # a loop ends


def test_pages_walk_every_item_once_in_either_order():
    all_items = [{"id": f"i{n}"} for n in range(7)]
    for order, expected in (("asc", all_items), ("desc", all_items[::-1])):
        seen, after = [], None
        while True:
            query = {"order": order, "limit": "3", **({"after": after} if after else {})}
            page = items.page(all_items, query)
            seen += page["data"]
            assert page["first_id"] == page["data"][0]["id"] and page["last_id"] == page["data"][-1]["id"]
            if not page["has_more"]:
                break
            after = page["last_id"]
        assert seen == expected
    default = items.page(all_items, {})
    assert default["data"] == all_items[::-1] and default["has_more"] is False and default["object"] == "list"
    assert items.page([], {}) == {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}


@pytest.mark.parametrize("query", [{"limit": "0"}, {"limit": "101"}, {"limit": "two"}, {"order": "up"},
                                   {"after": "nope"}])
def test_bad_page_queries_are_the_clients_400(query):
    with pytest.raises(BadRequest) as info:
        items.page([{"id": "a"}], query)
    assert info.value.param == next(iter(query))


def test_function_call_output_parts_are_kept_or_refused_never_dropped():
    """An output of parts: its text is the tool message, its images follow the run of tool
    messages as a user message (chat tool messages hold text), a file is refused."""
    from proxy.errors import UnsupportedFeature

    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    call2 = {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"}
    out = items.to_messages([
        {"role": "user", "content": "hi"}, call, call2,
        {"type": "function_call_output", "call_id": "c1",
         "output": [{"type": "input_text", "text": "IMG:"}, {"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
        {"type": "function_call_output", "call_id": "c2", "output": "plain"},
        {"role": "user", "content": "next"}])
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool", "user", "user"]
    assert out[2]["content"] == "IMG:" and out[3]["content"] == "plain"
    assert out[4]["content"] == [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]
    with pytest.raises(UnsupportedFeature, match="input_file"):
        items.to_messages([call, {"type": "function_call_output", "call_id": "c1",
                                  "output": [{"type": "input_file", "file_data": "JVBERi0="}]}])


def test_a_turn_that_only_reasoned_is_kept_before_the_next_user_message():
    """[user, reasoning, user] replayed with store: false: the reasoning is the model's turn (an
    assistant message holding it), not dropped."""
    out = items.to_messages([{"role": "user", "content": "a"},
                             {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]},
                             {"role": "user", "content": "b"}])
    assert out == [{"role": "user", "content": "a"}, {"role": "assistant", "content": "", "reasoning_content": "hmm"},
                   {"role": "user", "content": "b"}]


def test_reasoning_as_the_last_item_is_kept_as_the_models_turn():
    """[user, reasoning]: the reasoning was dropped when nothing followed it."""
    out = items.to_messages([{"role": "user", "content": "a"},
                             {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]}])
    assert out == [{"role": "user", "content": "a"}, {"role": "assistant", "content": "", "reasoning_content": "hmm"}]


def test_an_assistant_message_part_that_is_not_text_is_refused_not_dropped():
    from proxy.errors import UnsupportedFeature

    kept = items.to_messages([{"role": "assistant", "content": [{"type": "output_text", "text": "a"},
                                                                {"type": "refusal", "refusal": "no"}]}])
    assert kept == [{"role": "assistant", "content": "ano"}]
    with pytest.raises(UnsupportedFeature) as info:
        items.to_messages([{"role": "user", "content": "hi"},
                           {"role": "assistant", "content": [{"type": "output_text", "text": "see:"},
                                                             {"type": "input_image", "image_url": "data:image/png;base64,AA"}]}])
    assert info.value.param == "input[1].content[1]" and "input_image" in str(info.value)
