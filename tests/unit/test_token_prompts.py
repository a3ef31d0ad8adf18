"""Token-in paths (pure): the engine requests built from a chat request, the answers read back,
and the raw-text parser's edge cases. Parity with a real chat answer: tests/refserver/test_token_prompts.py."""

from __future__ import annotations

import json

import pytest

from pipeline.errors import CaptureError
from proxy import upstream
from proxy.providers.base import turn_from_chat
from proxy.upstream.assistant_text import parse_assistant_text, parse_tool_calls, split_reasoning
from proxy.upstream.token_prompts import (
    TOKENS_ROUTE,
    TokenInError,
    TokenInPath,
    chat_from_completion,
    chat_from_generate,
    check_path,
    completions_request,
    generate_request,
    token_in_answer,
    token_in_request,
)

VLLM, SGLANG = upstream.create("vllm"), upstream.create("sglang")
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "max_tokens": 30,
        "temperature": 0.5, "top_p": 0.9, "seed": 7, "stop": ["\nEND"], "include_stop_str_in_output": True,
        "min_tokens": 2, "chat_template_kwargs": {"enable_thinking": True}}
IDS = [11, 12, 13]


def test_completions_request_carries_the_ids_and_sampling_only():
    body = completions_request(CHAT, IDS, top_logprobs=3)
    assert body == {"model": "m", "prompt": IDS, "max_tokens": 30, "logprobs": 3, "return_token_ids": True,
                    "stream": False, "temperature": 0.5, "top_p": 0.9, "seed": 7, "stop": ["\nEND"],
                    "include_stop_str_in_output": True, "min_tokens": 2}
    # No limit given: an explicit null (the room left, as chat), never the completions default of 16.
    assert completions_request({"model": "m"}, IDS)["max_tokens"] is None
    assert completions_request({"model": "m", "max_tokens": 9, "max_completion_tokens": 4}, IDS)["max_tokens"] == 4


def test_generate_request_in_sglang_names():
    body = generate_request(CHAT, IDS, top_logprobs=2)
    assert body["input_ids"] == IDS and body["return_logprob"] is True and body["return_text_in_logprobs"] is True
    assert body["top_logprobs_num"] == 2 and "model" not in body
    assert body["sampling_params"] == {"max_new_tokens": 30, "temperature": 0.5, "top_p": 0.9, "sampling_seed": 7,
                                       "stop": ["\nEND"], "no_stop_trim": True, "min_new_tokens": 2}
    room = generate_request({"model": "m"}, IDS, context_length=100)["sampling_params"]["max_new_tokens"]
    assert room == 100 - len(IDS) - 1  # SGLang keeps one token of the context back
    assert generate_request({"model": "m"}, IDS)["sampling_params"]["max_new_tokens"] is None
    assert "top_logprobs_num" not in generate_request(CHAT, IDS)


def test_chat_routes_add_the_ids_to_the_dialects_own_request():
    call = token_in_request("chat_tokens", CHAT, IDS, engine=VLLM, top_logprobs=1)
    assert call.path == TOKENS_ROUTE == "/v1/chat/completions/tokens"
    assert call.body == {**VLLM.prepare(CHAT, top_logprobs=1), "prompt_token_ids": IDS}
    call = token_in_request(TokenInPath.CHAT_INPUT_IDS, CHAT, IDS, engine=SGLANG)
    assert call.path == "/v1/chat/completions" and call.body == {**SGLANG.prepare(CHAT), "input_ids": IDS}


@pytest.mark.parametrize("ids", [[], None, [1, "2"], [True], [-1], "1 2", [1.0]])
def test_bad_prompt_ids_are_refused(ids):
    for path in TokenInPath:
        with pytest.raises(TokenInError, match="non-empty list of token ids"):
            token_in_request(path, CHAT, ids, engine=VLLM)


@pytest.mark.parametrize("extra, why", [({"n": 2}, "n = 1"), ({"tool_choice": "required"}, "guided decoding"),
                                        ({"tool_choice": {"type": "function", "function": {"name": "bash"}}},
                                         "guided decoding"),
                                        ({"response_format": {"type": "json_object"}}, "guided decoding")])
def test_what_raw_text_paths_cannot_repeat_is_refused(extra, why):
    for path in (TokenInPath.COMPLETIONS, TokenInPath.SGLANG_GENERATE):
        with pytest.raises(TokenInError, match=why):
            token_in_request(path, {**CHAT, **extra}, IDS, engine=VLLM)
    # The engine-side chat paths do it themselves.
    assert token_in_request(TokenInPath.CHAT_TOKENS, {**CHAT, **extra}, IDS, engine=VLLM).path == TOKENS_ROUTE


def test_check_path_matches_the_engine_dialect():
    assert check_path("completions", "vllm") is TokenInPath.COMPLETIONS
    assert check_path("sglang_generate", "sglang") is TokenInPath.SGLANG_GENERATE
    with pytest.raises(TokenInError, match="is for sglang, not vllm"):
        check_path("sglang_generate", "vllm")
    with pytest.raises(TokenInError, match="unknown token-in path"):
        check_path("prompt", "vllm")


# --- answers -----------------------------------------------------------------------------------

def completion(text, ids, finish="stop", stop_reason=None, tops=None, echo=IDS):
    tokens = [f"t{i}" for i in ids]
    choice = {"index": 0, "text": text, "token_ids": ids, "finish_reason": finish, "stop_reason": stop_reason,
              "logprobs": {"tokens": tokens, "token_logprobs": [-0.5] * len(ids),
                           "top_logprobs": tops or [{t: -0.5} for t in tokens]}}
    if echo is not None:
        choice["prompt_token_ids"] = echo
    return {"id": "cmpl-1", "object": "text_completion", "created": 5, "model": "m", "choices": [choice]}


def test_completion_answer_is_a_vllm_chat_completion():
    text = '<think>\nPlan.\n</think>\n\nOn it.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
    tops = [{"t1": -0.5, "a": -0.1, "b": -2.0}, {"c": -0.3, "t2": -0.5, "d": -0.9}]
    answer = chat_from_completion(CHAT, IDS, completion(text, [1, 2], tops=tops), top_logprobs=2)
    captured = VLLM.extract(answer)
    assert captured.prompt_ids == IDS and captured.response_ids == [1, 2] and captured.response_logprobs == [-0.5] * 2
    assert captured.finish_reason == "tool_calls" and captured.response_tokens == ["t1", "t2"]
    turn = turn_from_chat(answer, "m")
    assert (turn.reasoning, turn.content) == ("Plan.", "On it.")
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("bash", '{"command": "ls"}')]
    assert answer["choices"][0]["message"]["tool_calls"][0]["id"].startswith("chatcmpl-tool-")
    assert [[t["token"] for t in e["top_logprobs"]] for e in turn.logprobs] == [["a", "t1"], ["c", "t2"]]
    assert turn.logprobs[0]["bytes"] == list(b"t1") and answer["usage"]["total_tokens"] == 5


def test_completion_answer_checks():
    with pytest.raises(CaptureError, match="other prompt ids"):
        chat_from_completion(CHAT, IDS, completion("x", [1], echo=[11, 12]))
    with pytest.raises(CaptureError, match="return_token_ids"):
        chat_from_completion(CHAT, IDS, {"choices": [{"text": "x"}]})
    bad = completion("x", [1, 2])
    bad["choices"][0]["logprobs"]["token_logprobs"] = [-1.0]
    with pytest.raises(CaptureError, match="do not align"):
        chat_from_completion(CHAT, IDS, bad)
    with pytest.raises(CaptureError, match="no choices"):
        chat_from_completion(CHAT, IDS, {"choices": []})
    # An engine that answers without echoing is taken at its word (the ids sent are the prompt).
    assert chat_from_completion(CHAT, IDS, completion("x", [1], echo=None))["prompt_token_ids"] == IDS


def test_finish_reasons_as_the_chat_route_gives_them():
    call = '<tool_call>\n{"name": "bash", "arguments": {}}\n</tool_call>'
    assert chat_from_completion(CHAT, IDS, completion(call, [1]))["choices"][0]["finish_reason"] == "tool_calls"
    # A call in the text of a length cut is still a call, but the finish stays length (as vLLM).
    cut = chat_from_completion(CHAT, IDS, completion(call, [1], finish="length"))["choices"][0]
    assert cut["finish_reason"] == "length" and len(cut["message"]["tool_calls"]) == 1
    # Without tools (or tool_choice none) the markup is content.
    for chat in ({"model": "m"}, {**CHAT, "tool_choice": "none"}):
        msg = chat_from_completion(chat, IDS, completion(call, [1]))["choices"][0]
        assert msg["finish_reason"] == "stop" and msg["message"]["content"] == call
    stopped = chat_from_completion(CHAT, IDS, completion("a", [1], stop_reason="\nEND"))["choices"][0]
    assert (stopped["finish_reason"], stopped["stop_reason"]) == ("stop", "\nEND")


def generated(text, ids, finish=None, tops=None):
    meta = {"id": "r", "finish_reason": finish or {"type": "stop", "matched": 99}, "prompt_tokens": 3,
            "completion_tokens": len(ids), "cached_tokens": 2, "weight_version": "v7",
            "output_token_logprobs": [[-0.25, t, f"t{t}"] for t in ids]}
    if tops is not None:
        meta["output_top_logprobs"] = tops
    return {"text": text, "output_ids": ids, "meta_info": meta}


def test_generate_answer_is_an_sglang_chat_completion():
    call = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
    answer = chat_from_generate(CHAT, IDS, generated(call, [4, 99]))
    captured = SGLANG.extract(answer)
    assert captured.prompt_ids == IDS and captured.response_ids == [4, 99] and captured.response_logprobs == [-0.25] * 2
    assert captured.finish_reason == "tool_calls" and captured.stop_reason is None
    choice = answer["choices"][0]
    assert choice["meta_info"]["finish_reason"] == {"type": "tool_calls", "matched": None}
    assert choice["meta_info"]["cached_tokens"] == 2 and answer["metadata"] == {"weight_version": "v7"}
    assert choice["message"]["tool_calls"][0]["index"] == 0 and choice["message"]["reasoning_content"] is None
    plain = chat_from_generate(CHAT, IDS, generated("Hello", [4, 99], tops=[[[-0.1, 5, "a"], [-0.2, 6, "b"]],
                                                                          [[-0.1, 7, "c"], [-0.3, 8, "d"]]]),
                               top_logprobs=1)["choices"][0]
    assert (plain["finish_reason"], plain["matched_stop"], plain["message"]["tool_calls"]) == ("stop", 99, None)
    assert [[t["token"] for t in e["top_logprobs"]] for e in plain["logprobs"]["content"]] == [["a"], ["c"]]
    cut = chat_from_generate(CHAT, IDS, generated("Hel", [4], {"type": "length", "length": 1}))["choices"][0]
    assert (cut["finish_reason"], cut["matched_stop"]) == ("length", None)
    aborted = chat_from_generate(CHAT, IDS, generated("", [], {"type": "abort", "message": "x"}))["choices"][0]
    assert aborted["finish_reason"] == "abort"


def test_generate_answer_checks():
    with pytest.raises(CaptureError, match="return_logprob"):
        chat_from_generate(CHAT, IDS, {"text": "x", "output_ids": [1], "meta_info": {}})
    bad = generated("x", [1, 2])
    bad["output_ids"] = [1, 3]
    with pytest.raises(CaptureError, match="do not align"):
        chat_from_generate(CHAT, IDS, bad)


def test_chat_answers_must_echo_the_ids_sent():
    good = {"prompt_token_ids": IDS, "choices": [{"message": {}}]}
    assert token_in_answer("chat_tokens", CHAT, IDS, good) is good
    for answer in ({"choices": [{}]}, {"prompt_token_ids": [1, 2], "choices": [{}]}):
        with pytest.raises(CaptureError):
            token_in_answer("chat_tokens", CHAT, IDS, answer)
    with pytest.raises(CaptureError, match="did not echo"):
        token_in_answer("chat_input_ids", CHAT, IDS, {"choices": [{"message": {}}]})
    assert token_in_answer("chat_input_ids", CHAT, IDS, {"choices": [{"prompt_token_ids": IDS}]})


# --- the raw-text parser's edge cases ------------------------------------------------------------

def names_args(calls):
    return [(c.name, json.loads(c.arguments)) for c in calls]


def test_parallel_calls_and_content_before():
    text = ('Two things.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
            '<tool_call>\n{"name": "b", "parameters": {"y": "é"}}\n</tool_call>')
    content, calls = parse_tool_calls(text)
    assert content == "Two things." and names_args(calls) == [("a", {"x": 1}), ("b", {"y": "é"})]
    assert calls[1].arguments == '{"y": "é"}'  # ensure_ascii=False, as vLLM writes arguments


def test_unclosed_and_invalid_blocks():
    # Unclosed but complete JSON at the end: a call (generation may stop before the end tag).
    assert names_args(parse_tool_calls('<tool_call>\n{"name": "a", "arguments": {}}')[1]) == [("a", {})]
    # Invalid JSON only: nothing is a call, the text stays content unchanged.
    for text in ('<tool_call>\n{"name": "a", "arguments": {</tool_call>', "<tool_call>[1]</tool_call>",
                 '<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"name": ""}</tool_call>', "<tool_call>"):
        assert parse_tool_calls(text) == (text, [])
    # One good, one bad: the bad block's text is kept in content after the prefix.
    content, calls = parse_tool_calls('Hi <tool_call>{"name": "a"}</tool_call><tool_call>{oops}</tool_call>')
    assert names_args(calls) == [("a", {})] and content == "Hi\n<tool_call>{oops}</tool_call>"
    # A null arguments value is an empty object; only calls: content None.
    assert parse_tool_calls('<tool_call>{"name": "a", "arguments": null}</tool_call>') == (None, [
        parse_tool_calls('<tool_call>{"name": "a"}</tool_call>')[1][0]])


def test_reasoning_split():
    assert split_reasoning("<think>\nhmm\n</think>\n\nDone") == ("hmm", "Done")
    assert split_reasoning("no tag at the start</think>rest") == ("no tag at the start", "rest")
    # No closing tag (cut off mid-thought, or not thinking): no reasoning, text unchanged.
    assert split_reasoning("<think>\nstill thinking") == (None, "<think>\nstill thinking")
    only = parse_assistant_text('<think>x</think>\n<tool_call>{"name": "a"}</tool_call>', parse_tools=True)
    assert (only.reasoning, only.content, len(only.tool_calls)) == ("x", None, 1)
    empty = parse_assistant_text("<think>x</think>", parse_tools=False)
    assert (empty.reasoning, empty.content) == ("x", None)
    assert parse_assistant_text("", parse_tools=True).content == ""
