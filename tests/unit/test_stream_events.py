"""A streamed answer's head goes out exactly once whether the waiter opened the stream (a long
call, kept alive) before the engine's answer was encoded or after (proxy/calls.py)."""

import json

import pytest

from proxy.calls import _StreamEvents
from proxy.providers import PROVIDERS, ToolCall, Turn
from tests.unit.sse import parse_sse

BODIES = {
    "openai_chat": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True},
    "anthropic": {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}], "stream": True},
    "openai_responses": {"model": "m", "input": "hi", "stream": True},
    "google": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
}


def _turn():
    return Turn(id="chatcmpl-1", model="m", created=1, content="hello", reasoning=None,
                tool_calls=[ToolCall("call_0", "bash", json.dumps({"cmd": "ls"}))],
                finish_reason="tool_calls", stop_reason=None, prompt_tokens=5, completion_tokens=3)


def _events(name, order):
    provider = PROVIDERS[name]
    parsed = provider.parse(BODIES[name], path_model="m" if name == "google" else None, stream=True)
    turn = _turn()
    response = provider.render(turn, parsed)
    writer = provider.stream(parsed)
    if order == "writer":  # the writer used directly: head (with the turn), then body
        return writer.head(turn) + writer.body(response, turn)
    if order == "writer, head first":  # the head sent before the engine answered
        return writer.head() + writer.body(response, turn)
    events = _StreamEvents(writer)
    if order == "opened first":
        return events.open() + events.encode(turn, response)
    return events.encode(turn, response) + events.open()  # the waiter, late: nothing more to open


def _shape(raw):
    """The events with what is random per answer (ids, clocks) left out."""
    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if not (k == "id" or k.endswith(("_id", "Id")) or k.startswith("created"))}
        return [strip(x) for x in v] if isinstance(v, list) else v
    def value(data):
        try:
            return strip(json.loads(data))
        except ValueError:
            return data  # [DONE]
    return [(event, value(data)) for event, data in parse_sse(raw)]


@pytest.mark.parametrize("name", sorted(BODIES))
def test_the_head_goes_out_once_in_either_order(name):
    direct, head_first = (_shape(b"".join(_events(name, order))) for order in ("writer", "writer, head first"))
    assert len(direct) >= 2
    assert _shape(b"".join(_events(name, "opened first"))) == head_first
    assert _shape(b"".join(_events(name, "encoded first"))) == direct
