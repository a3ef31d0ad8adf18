"""Prompt splicing (proxy/splice.py) against the reference server's real tokenizer and templates:
a spliced prompt is the recorded prompt + the sampled ids (+ end of turn) + the template's own
rendering of what came after -- where a plain re-rendering drifts (re-serialised arguments,
reasoning dropped from history, a non-canonical tokenisation the policy sampled)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.refserver import ModelEngine
from proxy import splice
from tests.refserver.conftest import BASH_TOOL

TEMPLATES = Path(__file__).resolve().parents[2] / "infra" / "refserver" / "templates"
CHAT = {"tools": [BASH_TOOL]}
SYSTEM = {"role": "system", "content": "You are a coding agent."}
USER = {"role": "user", "content": "List the files."}


@pytest.fixture(scope="module")
def stripping(model_dir):
    """The same model, rendering history the way DeepSeek-R1-style templates do."""
    return ModelEngine.load(model_dir, num_threads=1,
                            chat_template=(TEMPLATES / "strip_history_reasoning.jinja").read_text())


def eot(engine) -> int:
    return engine.tokenizer.convert_tokens_to_ids("<|im_end|>")


def sampled_text(content: str, args_json: str | None, reasoning: str | None = None) -> str:
    """What the policy sampled (hermes tool call markup, compact JSON where it chose so)."""
    text = f"<think>\n{reasoning}\n</think>\n\n" if reasoning else ""
    text += content
    if args_json is not None:
        text += ("\n" if content else "") + '<tool_call>\n{"name": "bash", "arguments": ' + args_json + "}\n</tool_call>"
    return text


def record(engine, entries, messages, chat, sampled_ids, sampled_msg, *, seq, finish="tool_calls", parent=None,
           prompt_ids=None):
    prompt = prompt_ids if prompt_ids is not None else engine.tokenize_chat(messages, chat.get("tools"))
    name, entry = splice.entry_for(completion_id=f"c{seq}", seq=seq, request_messages=messages, chat=chat,
                                   sampled=sampled_msg, prompt_ids=prompt, response_ids=sampled_ids,
                                   finish_reason=finish, parent=parent, eot_hint=eot(engine))
    entries[name] = entry
    return prompt


def renders(engine, messages, chat):
    j = splice.last_assistant(messages)
    return (engine.tokenize_chat(messages[:j + 1], chat.get("tools"), add_generation_prompt=False),
            engine.tokenize_chat(messages, chat.get("tools"), add_generation_prompt=True))


def spliced(engine, entries, messages, chat):
    found = splice.find(entries, {**chat, "messages": messages})
    assert isinstance(found, splice.Match), found
    out = splice.splice(entries, found, engine.tokenize_chat(messages, chat.get("tools")), eot(engine))
    assert isinstance(out, splice.Spliced), out
    return out


def tool_turn(args: dict, compact: bool, reasoning: str | None = None):
    args_json = json.dumps(args, separators=(",", ":")) if compact else json.dumps(args)
    msg = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": args_json}}]}
    if reasoning:
        msg["reasoning_content"] = reasoning
    return msg, args_json


def test_a_tool_turn_with_compact_arguments_is_continued_from_its_sampled_ids(engine):
    entries: dict = {}
    first = [SYSTEM, USER]
    msg, args_json = tool_turn({"command": "ls -la"}, compact=True)
    sampled = engine.tokenize_text(sampled_text("", args_json), add_special_tokens=False) + [eot(engine)]
    prompt = record(engine, entries, first, CHAT, sampled, msg, seq=1)
    # The harness sends the call back re-serialised, then the tool's output.
    echoed = {**msg, "tool_calls": [{**msg["tool_calls"][0], "id": "call_renamed",
                                     "function": {"name": "bash", "arguments": json.dumps({"command": "ls -la"})}}]}
    second = [SYSTEM, USER, echoed, {"role": "tool", "tool_call_id": "call_renamed", "content": "a.py\nb.py"}]
    out = spliced(engine, entries, second, CHAT)
    assert out.prompt_ids[:len(prompt) + len(sampled)] == prompt + sampled  # by construction
    assert out.spans[0] == (0, len(prompt) + len(sampled), "recorded") and out.spans[-1][2] == "rendered"
    rendered = engine.tokenize_chat(second, CHAT["tools"])
    assert rendered != out.prompt_ids  # the template re-serialises the arguments: a plain rendering drifts
    tail = engine.decode(out.prompt_ids[len(prompt) + len(sampled):], skip_special_tokens=False)
    assert tail == "\n<|im_start|>user\n<tool_response>\na.py\nb.py\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


def test_a_template_that_drops_history_reasoning_is_cut_at_the_same_turn(stripping):
    engine, entries = stripping, {}
    msg, args_json = tool_turn({"command": "cat a.py"}, compact=False, reasoning="Read it first.")
    sampled = engine.tokenize_text(sampled_text("", args_json, "Read it first."), add_special_tokens=False) + [eot(engine)]
    prompt = record(engine, entries, [SYSTEM, USER], CHAT, sampled, msg, seq=1)
    second = [SYSTEM, USER, msg, {"role": "tool", "tool_call_id": "call_1", "content": "x = 1"},
              {"role": "user", "content": "Now fix it."}]
    without_new, with_new = renders(engine, second, CHAT)
    assert with_new[:len(without_new)] != without_new  # not append-only: the think block is gone from history
    out = spliced(engine, entries, second, CHAT)
    assert out.prompt_ids[:len(prompt) + len(sampled)] == prompt + sampled  # the think block kept, as sampled
    assert engine.decode(out.prompt_ids[len(prompt) + len(sampled):], skip_special_tokens=False).startswith(
        "\n<|im_start|>user\n<tool_response>\nx = 1\n</tool_response><|im_end|>\n<|im_start|>user\nNow fix it.")


def test_a_non_canonical_tokenisation_the_policy_sampled_is_kept(engine):
    entries: dict = {}
    content = "Done: the files are listed."
    canonical = engine.tokenize_text(content, add_special_tokens=False)
    odd = [t for ch in content for t in engine.tokenize_text(ch, add_special_tokens=False)]  # one id a character
    assert odd != canonical
    msg = {"role": "assistant", "content": content}
    prompt = record(engine, entries, [SYSTEM, USER], {}, odd + [eot(engine)], msg, seq=1, finish="stop")
    second = [SYSTEM, USER, msg, {"role": "user", "content": "Thanks."}]
    out = spliced(engine, entries, second, {})
    assert out.prompt_ids[:len(prompt) + len(odd) + 1] == prompt + odd + [eot(engine)]
    assert engine.tokenize_chat(second) != out.prompt_ids  # re-tokenising the history would merge them


def test_a_turn_cut_at_the_length_limit_is_closed_with_the_end_of_turn_token(engine):
    entries: dict = {}
    cut = engine.tokenize_text("I will look at the", add_special_tokens=False)
    msg = {"role": "assistant", "content": "I will look at the"}
    prompt = record(engine, entries, [SYSTEM, USER], {}, cut, msg, seq=1, finish="length")
    out = spliced(engine, entries, [SYSTEM, USER, msg, {"role": "user", "content": "Go on."}], {})
    n = len(prompt) + len(cut)
    assert out.prompt_ids[n] == eot(engine) and (n, n + 1, "end_of_turn") in out.spans


def test_a_conversation_is_recorded_as_deltas_and_continued_turn_after_turn(engine):
    entries: dict = {}
    history, parent, total = [SYSTEM, USER], None, None
    for turn in range(4):
        msg, args_json = tool_turn({"command": f"step {turn}"}, compact=turn % 2 == 0)
        sampled = engine.tokenize_text(sampled_text("", args_json), add_special_tokens=False) + [eot(engine)]
        if parent is None:
            prompt = engine.tokenize_chat(history, CHAT["tools"])
        else:
            prompt = out.prompt_ids  # noqa: F821 - the previous iteration's splice
        record(engine, entries, history, CHAT, sampled, msg, seq=turn, parent=parent, prompt_ids=prompt)
        total = prompt + sampled
        history = [*history, msg, {"role": "tool", "tool_call_id": "call_1", "content": f"out {turn}"}]
        out = spliced(engine, entries, history, CHAT)
        assert out.prompt_ids[:len(total)] == total
        parent = out.parent
    # Each turn stores only what it added: the whole conversation once, not once per call.
    assert sum(len(e.ids) for e in entries.values()) == len(total)
    assert splice.decode_entries({k: e.encode() for k, e in entries.items()}) == entries


def test_reasoning_must_match_when_sent_back_and_may_be_missing(engine):
    entries: dict = {}
    msg, args_json = tool_turn({"command": "ls"}, compact=False, reasoning="Look around.")
    sampled = engine.tokenize_text(sampled_text("", args_json, "Look around."), add_special_tokens=False) + [eot(engine)]
    record(engine, entries, [SYSTEM, USER], CHAT, sampled, msg, seq=1)
    tool = {"role": "tool", "tool_call_id": "call_1", "content": "a.py"}
    dropped = {k: v for k, v in msg.items() if k != "reasoning_content"}  # a harness that drops reasoning
    assert isinstance(splice.find(entries, {**CHAT, "messages": [SYSTEM, USER, dropped, tool]}), splice.Match)
    other = {**msg, "reasoning_content": "Something else."}
    assert splice.find(entries, {**CHAT, "messages": [SYSTEM, USER, other, tool]}) == \
        splice.NoSplice(splice.REASONING_DIFFERS)


def test_edited_or_compacted_histories_and_first_calls_are_not_spliced(engine):
    entries: dict = {}
    msg, args_json = tool_turn({"command": "ls"}, compact=True)
    sampled = engine.tokenize_text(sampled_text("", args_json), add_special_tokens=False) + [eot(engine)]
    record(engine, entries, [SYSTEM, USER], CHAT, sampled, msg, seq=1)
    tool = {"role": "tool", "tool_call_id": "call_1", "content": "a.py"}
    edited = {**msg, "tool_calls": [{**msg["tool_calls"][0], "function": {"name": "bash", "arguments": '{"command": "ls -l"}'}}]}
    for messages, why in [
        ([SYSTEM, USER], splice.FIRST_CALL),
        ([SYSTEM, {"role": "user", "content": "Summary: files listed."}, msg, tool], splice.NO_MATCH),  # compacted
        ([SYSTEM, USER, edited, tool], splice.NO_MATCH),  # the harness rewrote the call
        ([SYSTEM, USER, msg], splice.ENDS_WITH_ASSISTANT),
    ]:
        assert splice.find(entries, {**CHAT, "messages": messages}) == splice.NoSplice(why)
    # other tools (a different system block) are another conversation
    assert splice.find(entries, {"tools": [], "messages": [SYSTEM, USER, msg, tool]}) == splice.NoSplice(splice.NO_MATCH)


def test_of_two_identical_answers_the_latest_one_is_continued(engine):
    entries: dict = {}
    msg = {"role": "assistant", "content": "Hello."}
    ids = engine.tokenize_text("Hello.", add_special_tokens=False) + [eot(engine)]
    record(engine, entries, [SYSTEM, USER], {}, ids, msg, seq=1, finish="stop")
    record(engine, entries, [SYSTEM, USER], {}, ids, msg, seq=5, finish="stop")
    found = splice.find(entries, {"messages": [SYSTEM, USER, msg, {"role": "user", "content": "Hi."}]})
    assert isinstance(found, splice.Match) and found.entry.completion_id == "c5"


def test_a_rendering_whose_turns_do_not_line_up_is_not_spliced(engine):
    entries: dict = {}
    msg = {"role": "assistant", "content": "Hello."}
    ids = engine.tokenize_text("Hello.", add_special_tokens=False) + [eot(engine)]
    prompt = record(engine, entries, [SYSTEM, USER], {}, ids, msg, seq=1, finish="stop")
    found = splice.find(entries, {"messages": [SYSTEM, USER, msg, {"role": "user", "content": "Hi."}]})
    whole = prompt + ids
    # fewer closed turns than the recorded ids hold (a template that merged two of them)
    assert splice.splice(entries, found, whole[:-1], eot(engine)) == splice.NoSplice(splice.BOUNDARY)
    # the right count, but another token after the cut than the template puts after a turn
    odd = whole + [engine.tokenize_text("x", add_special_tokens=False)[0], eot(engine)]
    assert splice.splice(entries, found, odd, eot(engine)) == splice.NoSplice(splice.BOUNDARY)


def test_a_rendering_with_more_turn_ends_than_the_recorded_ids_is_not_spliced_twice(engine):
    """The cut counts end-of-turn tokens; a rendering that holds one the recorded ids do not put
    it inside the recorded turn, and the rest of that turn was spliced in a second time (found by
    a probe, silently: the next token was still the newline). (a) A sampled text that spells the
    end-of-turn token -- ordinary tokens to the policy, the token itself to the re-rendering.
    (b) A prefill: the answer to an open assistant turn sent back as an assistant turn of its own."""
    tok = engine.tokenizer
    content = "Each turn ends with <|im_end|>\nfollowed by a newline."
    sampled = tok(content, add_special_tokens=False, split_special_tokens=True).input_ids + [eot(engine)]
    assert eot(engine) not in sampled[:-1]  # what the policy wrote: text, not the token
    entries: dict = {}
    msg = {"role": "assistant", "content": content}
    record(engine, entries, [SYSTEM, USER], {}, sampled, msg, seq=1, finish="stop")
    history = [SYSTEM, USER, msg, {"role": "user", "content": "Thanks."}]
    found = splice.find(entries, {"messages": history})
    assert isinstance(found, splice.Match)
    assert splice.splice(entries, found, engine.tokenize_chat(history), eot(engine)) == splice.NoSplice(splice.BOUNDARY)

    entries = {}
    opened = [SYSTEM, USER, {"role": "assistant", "content": "{"}]  # a prefill: the turn left open
    prompt = engine.tokenize_chat(opened, add_generation_prompt=False)[:-2]  # (without its closing)
    answer = {"role": "assistant", "content": '"a": 1}'}
    record(engine, entries, opened, {}, engine.tokenize_text('"a": 1}', add_special_tokens=False) + [eot(engine)],
           answer, seq=1, finish="stop", prompt_ids=prompt)
    history = [*opened, answer, {"role": "user", "content": "Again."}]
    found = splice.find(entries, {"messages": history})
    assert isinstance(found, splice.Match)
    assert splice.splice(entries, found, engine.tokenize_chat(history), eot(engine)) == splice.NoSplice(splice.BOUNDARY)


def test_arguments_a_javascript_harness_sends_back_with_its_one_number_type_still_match():
    """The policy wrote ``"timeout": 30.0``; every harness CLI is a Node program and echoes it as
    ``30`` (JSON.parse, JSON.stringify): the same JSON value, which matched no recorded turn (a
    missed splice: the call was rendered and drifted)."""
    chat = {"messages": [USER]}
    sampled = {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function", "function": {
        "name": "bash", "arguments": '{"command": "sleep 1", "timeout": 30.0, "nested": [{"n": 2.0}, 2.5]}'}}]}
    name, entry = splice.entry_for(completion_id="c1", seq=1, request_messages=chat["messages"], chat=chat,
                                   sampled=sampled, prompt_ids=[1, 2, 3], response_ids=[7, 8, 9],
                                   finish_reason="tool_calls", parent=None, eot_hint=9)
    echo = json.loads(json.dumps(sampled))
    echo["tool_calls"][0]["function"]["arguments"] = '{"command":"sleep 1","timeout":30,"nested":[{"n":2},2.5]}'
    found = splice.find({name: entry}, {"messages": [USER, echo, {"role": "tool", "tool_call_id": "a", "content": "ok"}]})
    assert isinstance(found, splice.Match), found
    other = json.loads(json.dumps(echo))  # a value that differs is still no match
    other["tool_calls"][0]["function"]["arguments"] = '{"command":"sleep 1","timeout":31}'
    assert splice.find({name: entry}, {"messages": [USER, other, {"role": "user", "content": "?"}]}) == \
        splice.NoSplice(splice.NO_MATCH)
