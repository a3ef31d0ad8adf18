"""What the vendors' APIs refuse with a 400 is refused here too, in each API's own error shape,
through the official SDKs and the reference model (nothing reaches the engine)."""

from __future__ import annotations

import openai
import pytest

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
