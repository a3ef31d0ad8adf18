"""History rendering like vLLM: assistant tool-call argument strings are parsed before the template.

Agent CLIs send earlier tool calls back with ``function.arguments`` re-serialised however they like
(compact, ASCII-escaped, ...). vLLM ``json.loads`` them (chat_utils ``_postprocess_messages``), so
the template's ``tojson`` re-renders them canonically; these tests hold the reference server to that.
"""

import json

import pytest

from infra.refserver import ModelEngine
from infra.refserver.history import ToolArgumentsError, parse_tool_call_arguments

from .conftest import BASH_TOOL, SCRIPT

START = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix it."}]


def post(client, path, **body):
    return client.post(path, data=json.dumps(body), content_type="application/json")


def post_ok(client, path, **body):
    r = post(client, path, **body)
    assert r.status_code == 200, r.get_json()
    return r.get_json()


def history(arguments, name="bash"):
    """START + one earlier assistant tool call carrying `arguments` + its result."""
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return START + [{"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]


def json_error(text) -> str:
    try:
        json.loads(text)
    except ValueError as exc:
        return str(exc)
    raise AssertionError(f"{text!r} is valid JSON")


# ------------------------------------------------------------------ the pre-processing itself

@pytest.mark.parametrize("given, passed", [
    ('{"command":"ls"}', {"command": "ls"}),
    (' {"b": 1,\n "a": [1, 2.5, null]} ', {"b": 1, "a": [1, 2.5, None]}),
    ('{"path": "\\u00e9.txt"}', {"path": "é.txt"}),
    ({"command": "ls"}, {"command": "ls"}),  # already an object: kept
    ([1, 2], [1, 2]),
    # Empty, missing and JSON null all become {} (vLLM's "if arguments is None or empty string").
    ("", {}), (None, {}), ("null", {}), ({}, {}),
    # Other valid JSON is passed on parsed, as vLLM releases do.
    ("[1,2]", [1, 2]), ("42", 42), ('"x"', "x"), ("true", True),
])
def test_arguments_parsed_like_vllm(given, passed):
    messages = history(given)
    before = json.loads(json.dumps(messages))
    out = parse_tool_call_arguments(messages)
    assert out[2]["tool_calls"][0]["function"]["arguments"] == passed
    assert out[2]["tool_calls"][0]["id"] == "call_1" and out[:2] == START and out[3] == messages[3]
    assert json.loads(json.dumps(messages)) == before  # the request's own messages are not modified


@pytest.mark.parametrize("given", ['{"command": "ls', "{'command': 'ls'}", " ", "ls -la", '{"a": 1}}', True, 5])
def test_arguments_that_are_not_json_fail_with_jsons_message(given):
    with pytest.raises(ToolArgumentsError) as err:
        parse_tool_call_arguments(history(given))
    if isinstance(given, str):
        assert str(err.value) == json_error(given)
    else:
        assert "must be str, bytes or bytearray" in str(err.value)


def test_other_messages_and_shapes():
    flat = [{"role": "assistant", "content": "x", "tool_calls": [{"name": "bash", "arguments": '{"a":1}'}]}]
    assert parse_tool_call_arguments(flat)[0]["tool_calls"][0]["arguments"] == {"a": 1}
    # An empty tool_calls list is dropped, as vLLM does, so templates take the plain assistant path.
    assert parse_tool_call_arguments([{"role": "assistant", "content": "x", "tool_calls": []}]) == [
        {"role": "assistant", "content": "x"}]
    # Only assistant messages are touched; anything odd is left for validation and the template.
    odd = [{"role": "user", "content": "x", "tool_calls": [{"name": "a", "arguments": "{"}]},
           {"role": "assistant", "tool_calls": None}, {"role": "assistant", "tool_calls": [7, {"function": 3}]}]
    assert parse_tool_call_arguments(odd) == odd


# ------------------------------------------------------------------ prompt ids through the engine

@pytest.mark.parametrize("obj", [
    {"command": "ls -la"},
    {"command": "pytest -q tests/ ✓", "timeout": 30, "env": {"B": "1", "A": None}, "flags": [True, 1.5]},
])
def test_compact_string_renders_like_the_object_and_like_the_sampled_text(engine, obj):
    as_object = engine.tokenize_chat(history(obj), [BASH_TOOL])
    # What a hermes model samples and what the server returns: json.dumps(..., ensure_ascii=False).
    sampled = json.dumps(obj, ensure_ascii=False)
    for resent in (sampled, json.dumps(obj, separators=(",", ":"), ensure_ascii=False),
                   json.dumps(obj), json.dumps(obj, indent=2)):
        assert engine.tokenize_chat(history(resent), [BASH_TOOL]) == as_object, resent
    text = engine.render_chat(history(obj), [BASH_TOOL])
    assert f'<tool_call>\n{{"name": "bash", "arguments": {sampled}}}\n</tool_call>' in text


def test_a_tojson_only_template_gets_objects_too(engine):
    # Qwen2.5's template renders `arguments | tojson` whatever its type: a string left unparsed would
    # come out quoted ("{\"command\": ...}"); after vLLM's parsing it is the object.
    qwen25_style = ("{%- for m in messages -%}{{ m.role }}:{%- for c in m.tool_calls or [] -%}"
                    "{{ c.function.arguments | tojson }}{%- endfor -%};{%- endfor -%}")
    eng = ModelEngine(engine.tokenizer, engine.model, max_model_len=engine.max_model_len, chat_template=qwen25_style)
    out = eng.render_chat(history('{"command":"ls"}'), add_generation_prompt=False)
    assert out == 'system:;user:;assistant:{"command": "ls"};tool:;'


# ------------------------------------------------------------------ the HTTP paths

def test_scripted_turns_resent_compactly_do_not_drift(client, engine, ref_tokenizer):
    """The script's tool calls come back re-serialised by the client; every next prompt still extends
    previous prompt + sampled ids, and equals the prompt of the history as the server returned it."""
    messages = list(START)
    prev = None
    for turn in SCRIPT["turns"]:
        variants = {}
        for style in ("as_returned", "compact", "ascii", "object"):
            msgs = [dict(m) for m in messages]
            for m in msgs:
                if m["role"] == "assistant" and m.get("tool_calls"):
                    m["tool_calls"] = [resend(c, style) for c in m["tool_calls"]]
            data = post_ok(client, "/v1/chat/completions", model="script3", messages=msgs, tools=[BASH_TOOL],
                           return_token_ids=True)
            variants[style] = (data, msgs)
            # /tokenize's messages form renders the same way.
            assert post_ok(client, "/tokenize", model="script3", messages=msgs, tools=[BASH_TOOL],
                           add_generation_prompt=True)["tokens"] == data["prompt_token_ids"]
        data = variants["as_returned"][0]
        prompt, ids = data["prompt_token_ids"], data["choices"][0]["token_ids"]
        assert all(v[0]["prompt_token_ids"] == prompt for v in variants.values())
        if prev is not None:
            assert prompt[: len(prev)] == prev  # no drift, whatever the client did to the arguments
            # Rendered without vLLM's parsing, the compact history would have drifted.
            raw = ref_tokenizer(ref_tokenizer.apply_chat_template(
                variants["compact"][1], tools=[BASH_TOOL], add_generation_prompt=True, tokenize=False),
                add_special_tokens=False).input_ids
            assert raw[: len(prev)] != prev
        prev = prompt + ids
        msg = data["choices"][0]["message"]
        assert [json.loads(c["function"]["arguments"]) for c in msg.get("tool_calls", [])] == [
            c["arguments"] for c in turn.get("tool_calls", [])]
        messages.append({"role": "assistant", "content": msg["content"], **(
            {"tool_calls": msg["tool_calls"]} if msg.get("tool_calls") else {})})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in msg.get("tool_calls", [])]


def resend(call, style):
    """A returned tool call as a client might send it back."""
    args = call["function"]["arguments"]
    obj = json.loads(args)
    new = {"as_returned": args, "compact": json.dumps(obj, separators=(",", ":"), ensure_ascii=False),
           "ascii": json.dumps(obj), "object": obj}[style]
    return {**call, "function": {**call["function"], "arguments": new}}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
@pytest.mark.parametrize("bad", ['{"command": "ls', '{"command": "ls"} trailing', "{command: ls}"])
def test_invalid_json_arguments_are_a_400_like_vllm(client, path, bad):
    r = post(client, path, model="tiny", messages=history(bad), tools=[BASH_TOOL], max_tokens=1)
    assert r.status_code == 400
    # vLLM: json.JSONDecodeError (a ValueError) while pre-processing -> 400 BadRequestError, json's text.
    assert r.get_json() == {"error": {"message": json_error(bad), "type": "BadRequestError", "param": None,
                                      "code": 400}}


@pytest.mark.parametrize("empty", ["", None, "null"])
def test_empty_arguments_render_as_an_empty_object(client, engine, empty):
    data = post_ok(client, "/v1/chat/completions", model="tiny", messages=history(empty), tools=[BASH_TOOL],
                   max_tokens=1, seed=0, return_token_ids=True)
    assert data["prompt_token_ids"] == engine.tokenize_chat(history({}), [BASH_TOOL])
