import json
import re

import pytest

from infra.refserver.hermes import parse_tool_calls

from .conftest import BASH_TOOL

ID_RE = re.compile(r"^chatcmpl-tool-[0-9a-f]{32}$")

TOOLS_HEADER = (
    "<|im_start|>system\n{system}\n\n# Tools\n\nYou may call one or more functions to assist with the user query."
    "\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
    "XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call><|im_end|>\n"
)


def render(tok, messages, tools=None, gen=True, **kw):
    return tok.apply_chat_template(messages, tools=tools, add_generation_prompt=gen, tokenize=False, **kw)


def test_plain_chat_has_no_default_system(ref_tokenizer):
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "?"}]
    assert render(ref_tokenizer, msgs) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n"
        "<|im_start|>user\n?<|im_end|>\n<|im_start|>assistant\n")
    sys_msgs = [{"role": "system", "content": "Be brief."}] + msgs[:1]
    assert render(ref_tokenizer, sys_msgs, gen=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n")


@pytest.mark.parametrize("system", [None, "You are a coding agent."])
def test_tools_block(ref_tokenizer, system):
    other = {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}}
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": "go"}]
    out = render(ref_tokenizer, msgs, tools=[BASH_TOOL, other])
    tools_txt = "".join("\n" + json.dumps(t, ensure_ascii=False) for t in [BASH_TOOL, other])
    header = TOOLS_HEADER.format(system=system or "You are a helpful assistant.", tools=tools_txt)
    assert out == header + "<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n"
    assert out.count("<|im_start|>system") == 1


def test_assistant_tool_calls_both_shapes_and_grouped_tool_responses(ref_tokenizer):
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
            {"name": "read", "arguments": {"path": "é.txt", "n": [1, 2]}},
        ]},
        {"role": "tool", "tool_call_id": "a", "content": "file1"},
        {"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "li"}, {"type": "image_url"},
                                                          {"type": "text", "text": "ne"}]},
        {"role": "assistant", "content": "Done.", "tool_calls": [{"function": {"name": "bash", "arguments": {}}}]},
        {"role": "tool", "content": "ok"},
    ]
    out = render(ref_tokenizer, msgs, gen=False)
    assert out == (
        "<|im_start|>user\ngo<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"é.txt\", \"n\": [1, 2]}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nfile1\n</tool_response>\n<tool_response>\nline\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nDone.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n")


def test_list_of_parts_content_and_determinism(ref_tokenizer):
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}},
                                         {"type": "text", "text": "b"}]}]
    first = render(ref_tokenizer, msgs, tools=[BASH_TOOL])
    assert first.endswith("<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n")
    assert all(render(ref_tokenizer, msgs, tools=[BASH_TOOL]) == first for _ in range(3))


def test_continue_final_message(ref_tokenizer):
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure, "}]
    assert render(ref_tokenizer, msgs, gen=False, continue_final_message=True) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nSure, ")


# ------------------------------------------------------------------ hermes

def test_parse_content_and_calls():
    text = ('Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>\n'
            '<tool_call>{"name": "read", "arguments": {"path": "ü"}}</tool_call>')
    content, calls = parse_tool_calls(text)
    assert content == "Let me look."
    assert [c["function"]["name"] for c in calls] == ["bash", "read"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"command": "ls"}
    assert calls[1]["function"]["arguments"] == '{"path": "ü"}'
    assert all(ID_RE.match(c["id"]) and c["type"] == "function" for c in calls)
    assert calls[0]["id"] != calls[1]["id"]


def test_parse_only_calls_gives_none_content():
    content, calls = parse_tool_calls('<tool_call>\n{"name": "bash", "arguments": {}}\n</tool_call>')
    assert content is None and len(calls) == 1 and calls[0]["function"]["arguments"] == "{}"


@pytest.mark.parametrize("text", ["plain text, no calls  ", "", "<tool_call>not json</tool_call>",
                                  '<tool_call>{"arguments": {}}</tool_call>', "<tool_call>[1, 2]</tool_call>",
                                  "<tool_call>"])
def test_unparseable_stays_text(text):
    assert parse_tool_calls(text) == (text, [])


def test_bad_block_kept_next_to_good_one():
    text = 'pre <tool_call>{oops}</tool_call><tool_call>{"name": "x", "arguments": {"a": 1}}</tool_call>'
    content, calls = parse_tool_calls(text)
    assert [c["function"]["name"] for c in calls] == ["x"]
    assert content == "pre\n<tool_call>{oops}</tool_call>"


def test_unclosed_final_block_is_parsed():
    content, calls = parse_tool_calls('<tool_call>\n{"name": "bash", "arguments": {"command": "pwd"}}\n')
    assert content is None and json.loads(calls[0]["function"]["arguments"]) == {"command": "pwd"}


def test_brackets_nested_past_the_json_parser_depth_stay_text():
    # json.loads raises RecursionError, not ValueError, on such input; a sampled turn can be it.
    text = "<tool_call>" + "[" * 100_000 + "</tool_call>"
    assert parse_tool_calls(text) == (text, [])
