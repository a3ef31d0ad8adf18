"""Properties over generated conversations: every provider reads the same conversation into
the same chat messages, and any engine answer renders (and streams) without crashing into a
response the vendor's SDK accepts."""

from __future__ import annotations

import json

from anthropic.types import Message
from google.genai import types as gt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from proxy.providers import PROVIDERS, ToolCall, Turn
from tests.unit.sse import parse_sse

text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=20)
names = st.sampled_from(["bash", "read_file", "edit"])
args = st.dictionaries(st.text(alphabet="abcxyz_", min_size=1, max_size=6),
                       st.one_of(st.integers(-5, 5), st.text(max_size=8), st.booleans()), max_size=3)
assistant = st.fixed_dictionaries({
    "reasoning": st.one_of(st.none(), text),
    "text": st.one_of(st.none(), text),
    "calls": st.lists(st.tuples(names, args), max_size=2),
})
conversation = st.lists(st.tuples(text, assistant), min_size=1, max_size=3)


def ids(turn_index, calls):
    return [f"call_{turn_index}_{j}" for j in range(len(calls))]


def as_chat(conv):
    msgs = [{"role": "system", "content": "sys"}]
    for i, (user, a) in enumerate(conv):
        msgs.append({"role": "user", "content": user})
        m = {"role": "assistant", "content": a["text"] if a["text"] or not a["calls"] else None}
        if a["reasoning"]:
            m["reasoning_content"] = a["reasoning"]
        if a["calls"]:
            m["tool_calls"] = [{"id": cid, "type": "function", "function": {"name": n, "arguments": json.dumps(x)}}
                               for cid, (n, x) in zip(ids(i, a["calls"]), a["calls"])]
        msgs.append(m)
        msgs += [{"role": "tool", "tool_call_id": cid, "content": f"result {cid}"} for cid in ids(i, a["calls"])]
    msgs.append({"role": "user", "content": "next"})
    return {"model": "m", "messages": msgs}


def as_anthropic(conv):
    msgs, pending = [], []
    for i, (user, a) in enumerate(conv):
        content = [{"type": "tool_result", "tool_use_id": cid, "content": f"result {cid}"} for cid in pending]
        msgs.append({"role": "user", "content": content + [{"type": "text", "text": user}]})
        blocks = []
        if a["reasoning"]:
            blocks.append({"type": "thinking", "thinking": a["reasoning"], "signature": "s"})
        if a["text"] or not a["calls"]:
            blocks.append({"type": "text", "text": a["text"] or ""})
        pending = ids(i, a["calls"])
        blocks += [{"type": "tool_use", "id": cid, "name": n, "input": x} for cid, (n, x) in zip(pending, a["calls"])]
        msgs.append({"role": "assistant", "content": blocks})
    content = [{"type": "tool_result", "tool_use_id": cid, "content": f"result {cid}"} for cid in pending]
    msgs.append({"role": "user", "content": content + [{"type": "text", "text": "next"}]})
    return {"model": "m", "max_tokens": 10, "system": "sys", "messages": msgs}


def as_responses(conv):
    items = []
    for i, (user, a) in enumerate(conv):
        items.append({"role": "user", "content": user})
        if a["reasoning"]:
            items.append({"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": a["reasoning"]}]})
        if a["text"] or not a["calls"]:
            items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": a["text"] or ""}]})
        for cid, (n, x) in zip(ids(i, a["calls"]), a["calls"]):
            items.append({"type": "function_call", "call_id": cid, "name": n, "arguments": json.dumps(x)})
        items += [{"type": "function_call_output", "call_id": cid, "output": f"result {cid}"} for cid in ids(i, a["calls"])]
    items.append({"role": "user", "content": "next"})
    return {"model": "m", "instructions": "sys", "input": items}


def as_google(conv):
    contents = []
    for i, (user, a) in enumerate(conv):
        contents.append({"role": "user", "parts": [{"text": user}]})
        parts = [{"text": a["reasoning"], "thought": True}] if a["reasoning"] else []
        if a["text"] or not a["calls"]:
            parts.append({"text": a["text"] or ""})
        parts += [{"functionCall": {"name": n, "args": x, "id": cid}} for cid, (n, x) in zip(ids(i, a["calls"]), a["calls"])]
        contents.append({"role": "model", "parts": parts})
        if a["calls"]:
            contents.append({"role": "user", "parts": [
                {"functionResponse": {"name": n, "id": cid, "response": {"output": f"result {cid}"}}}
                for cid, (n, _) in zip(ids(i, a["calls"]), a["calls"])]})
    contents.append({"role": "user", "parts": [{"text": "next"}]})
    return {"systemInstruction": {"parts": [{"text": "sys"}]}, "contents": contents}


def canonical(messages):
    """Content as plain text, so string and text-part representations compare equal."""
    out = []
    for m in messages:
        m = dict(m)
        if isinstance(m.get("content"), list):
            m["content"] = "".join(p["text"] for p in m["content"])
        if m["role"] == "assistant":
            m["content"] = m.get("content") or None
            for c in m.get("tool_calls") or []:
                c["function"]["arguments"] = json.loads(c["function"]["arguments"])
        out.append(m)
    return out


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(conversation)
def test_every_provider_reads_a_conversation_into_the_same_messages(conv):
    want = canonical(PROVIDERS["openai_chat"].parse(as_chat(conv)).chat["messages"])
    for name, body in (("anthropic", as_anthropic(conv)), ("openai_responses", as_responses(conv)),
                       ("google", as_google(conv))):
        got = canonical(PROVIDERS[name].parse(body, path_model="m").chat["messages"])
        assert got == want, name


turns = st.builds(
    lambda content, reasoning, calls, finish, stop: Turn(
        id="chatcmpl-x", model="m", created=1, content=content, reasoning=reasoning,
        tool_calls=[ToolCall(f"c{i}", n, json.dumps(a)) for i, (n, a) in enumerate(calls)],
        finish_reason="tool_calls" if calls and finish == "stop" else finish, stop_reason=stop,
        prompt_tokens=3, completion_tokens=2),
    st.one_of(st.none(), text), st.one_of(st.none(), text), st.lists(st.tuples(names, args), max_size=3),
    st.sampled_from(["stop", "length", "content_filter", "abort"]), st.one_of(st.none(), text, st.integers(0, 9)))

VALIDATORS = {"openai_chat": ChatCompletion.model_validate, "anthropic": Message.model_validate,
              "openai_responses": Response.model_validate, "google": gt.GenerateContentResponse.model_validate}
REQUESTS = {"openai_chat": as_chat([("q", {"reasoning": None, "text": "a", "calls": []})]),
            "anthropic": {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "q"}]},
            "openai_responses": {"model": "m", "input": "q", "include": ["reasoning.encrypted_content"]},
            "google": {"contents": [{"parts": [{"text": "q"}]}],
                       "generationConfig": {"thinkingConfig": {"includeThoughts": True}}}}


@settings(max_examples=200, deadline=None)
@given(turns, st.sampled_from(sorted(PROVIDERS)), st.booleans())
def test_any_engine_answer_renders_and_streams(turn, name, early):
    provider = PROVIDERS[name]
    parsed = provider.parse(REQUESTS[name], path_model="m")
    response = provider.render(turn, parsed)
    VALIDATORS[name](json.loads(json.dumps(response)))
    writer = provider.stream(parsed)
    events = writer.head() if early else writer.head(turn)
    events += writer.body(response, turn)
    parsed_events = parse_sse(b"".join(events))
    assert parsed_events
    for event, data in parsed_events:
        if data != "[DONE]":
            payload = json.loads(data)
            if event:
                assert payload["type"] == event
