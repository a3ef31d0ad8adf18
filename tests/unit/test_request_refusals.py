"""What the vendors refuse with a 400, refused by the conversions too (no I/O); and what a
field means to the prompt, carried into it."""

from __future__ import annotations

import pytest

from proxy.errors import BadRequest
from proxy.providers import PROVIDERS
from proxy.providers.anthropic_tools import TOOL_ERROR

A = PROVIDERS["anthropic"]


def anthropic_body(**extra):
    return {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], **extra}


def test_anthropic_stop_sequences_must_be_a_list():
    with pytest.raises(BadRequest) as info:
        A.parse(anthropic_body(stop_sequences="END"))
    assert info.value.param == "stop_sequences"
    assert A.parse(anthropic_body(stop_sequences=["END"])).chat["stop"] == ["END"]


def tool_round(result: dict) -> list[dict]:
    return [{"role": "user", "content": "ls"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", **result}]}]


@pytest.mark.parametrize("result, text", [
    ({"content": "boom", "is_error": True}, f"{TOOL_ERROR}\nboom"),
    ({"content": [{"type": "text", "text": "boom"}], "is_error": True}, f"{TOOL_ERROR}\nboom"),
    ({"is_error": True}, TOOL_ERROR),
    ({"content": "fine", "is_error": False}, "fine"),
    ({"content": "fine"}, "fine"),
])
def test_an_anthropic_tool_error_is_marked_in_the_tool_message(result, text):
    chat = A.parse(anthropic_body(messages=tool_round(result))).chat
    assert chat["messages"][-1] == {"role": "tool", "tool_call_id": "t1", "content": text}


def test_an_anthropic_is_error_must_be_a_boolean():
    with pytest.raises(BadRequest) as info:
        A.parse(anthropic_body(messages=tool_round({"content": "x", "is_error": "yes"})))
    assert info.value.param == "messages.2.content.0.is_error"
