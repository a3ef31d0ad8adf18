import json

import pytest

from infra.refserver import ScriptedPolicy, create_app
from infra.refserver.engine import Generation
from infra.refserver.policy import ScriptError
from infra.refserver.reasoning import split_reasoning

from .conftest import BASH_TOOL

TOL = 1e-4

THINK_SCRIPT = [
    {"reasoning": "I should look at the files first.", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]},
    {"reasoning": "Both files are there.\nDone.", "content": "Everything is in place."},
]

HISTORY = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "List the files."},
    {"role": "assistant", "content": None, "reasoning_content": "Use ls.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "README.md"},
    {"role": "assistant", "content": "There is a README.", "reasoning": "One file.\n\nShort answer."},
    {"role": "user", "content": "Thanks."},
]


def post_chat(client, **body):
    r = client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json")
    assert r.status_code == 200, r.get_json()
    return r.get_json()


def render(tok, messages, tools=None, gen=True, **kw):
    return tok.apply_chat_template(messages, tools=tools, add_generation_prompt=gen, tokenize=False, **kw)


@pytest.fixture(scope="module")
def think_client(engine):
    app = create_app(engine, policies={"think": ScriptedPolicy.from_obj(THINK_SCRIPT, name="think")})
    return app.test_client()


# ------------------------------------------------------------------ template

def test_reasoning_renders_as_think_block(ref_tokenizer):
    out = render(ref_tokenizer, HISTORY[1:5], gen=False)
    assert out == (
        "<|im_start|>user\nList the files.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nUse ls.\n</think>\n\n"
        "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nREADME.md\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\nOne file.\n\nShort answer.\n</think>\n\nThere is a README.<|im_end|>\n")


def test_reasoning_content_preferred_and_empty_reasoning_ignored(ref_tokenizer):
    user = {"role": "user", "content": "hi"}
    both = {"role": "assistant", "content": "yo", "reasoning_content": "A", "reasoning": "B"}
    assert "<think>\nA\n</think>\n\nyo" in render(ref_tokenizer, [user, both], gen=False)
    plain = render(ref_tokenizer, [user, {"role": "assistant", "content": "yo"}], gen=False)
    for empty in ({"reasoning_content": ""}, {"reasoning": None}, {"reasoning_content": "", "reasoning": ""}):
        assert render(ref_tokenizer, [user, {"role": "assistant", "content": "yo", **empty}], gen=False) == plain


def test_prompt_with_reasoning_history_matches_independent_rendering(client, ref_tokenizer):
    data = post_chat(client, model="tiny", messages=HISTORY, tools=[BASH_TOOL], max_tokens=2, seed=0,
                     return_token_ids=True)
    text = render(ref_tokenizer, HISTORY, tools=[BASH_TOOL])
    assert text.count("<think>") == 2
    assert data["prompt_token_ids"] == ref_tokenizer(text, add_special_tokens=False).input_ids


def test_enable_thinking_false_changes_only_the_generation_prompt(client, ref_tokenizer):
    msgs = HISTORY[:2]
    base = render(ref_tokenizer, msgs, tools=[BASH_TOOL])
    assert base.endswith("<|im_start|>assistant\n")
    off = render(ref_tokenizer, msgs, tools=[BASH_TOOL], enable_thinking=False)
    assert off == base + "<think>\n\n</think>\n\n"
    assert render(ref_tokenizer, msgs, tools=[BASH_TOOL], enable_thinking=True) == base
    for kw in ({}, {"enable_thinking": False}, {"enable_thinking": True}):
        assert render(ref_tokenizer, HISTORY, gen=False, **kw) == render(ref_tokenizer, HISTORY, gen=False)
    # The server passes chat_template_kwargs through to the same template.
    for flag, expected in ((False, off), (True, base)):
        data = post_chat(client, messages=msgs, tools=[BASH_TOOL], max_tokens=1, return_token_ids=True,
                         chat_template_kwargs={"enable_thinking": flag})
        assert data["prompt_token_ids"] == ref_tokenizer(expected, add_special_tokens=False).input_ids


# ------------------------------------------------------------------ parsing

@pytest.mark.parametrize("text, expected", [
    ("<think>\nhm, ok\n</think>\n\nHello", ("hm, ok", "Hello")),
    ("hm</think>Hello", ("hm", "Hello")),
    ("  <think> a </think>\n\n\n  b\n", ("a", "  b\n")),
    ("<think>\n\n</think>\n\n", ("", "")),
    ("no think at all", (None, "no think at all")),
    ("<think>cut off mid-thought", (None, "<think>cut off mid-thought")),
    ("a</think>b</think>c", ("a", "b</think>c")),
])
def test_split_reasoning(text, expected):
    assert split_reasoning(text) == expected


@pytest.mark.parametrize("text, reasoning, content, n_calls", [
    ("<think>\nPlan.\n</think>\n\nHello", "Plan.", "Hello", 0),
    ('<think>\nPlan.\n</think>\n\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>',
     "Plan.", None, 1),
    ('Text <tool_call>\n{"name": "bash", "arguments": {}}\n</tool_call>', None, "Text", 1),
    ("<think>never closed", None, "<think>never closed", 0),
])
def test_sampled_text_is_split(app, engine, monkeypatch, text, reasoning, content, n_calls):
    ids = engine.tokenize_text(text, add_special_tokens=False) + [engine.eos_token_id]
    fake = Generation(ids, [-1.0] * len(ids), "stop", None, text, None)
    monkeypatch.setattr(engine, "generate", lambda *a, **k: fake)
    data = post_chat(app.test_client(), messages=[{"role": "user", "content": "go"}], tools=[BASH_TOOL],
                     return_token_ids=True)
    choice = data["choices"][0]
    assert choice["message"]["reasoning"] == reasoning
    assert choice["message"]["content"] == content
    assert len(choice["message"].get("tool_calls", [])) == n_calls
    assert choice["finish_reason"] == ("tool_calls" if n_calls else "stop")
    assert choice["token_ids"] == ids  # ids always cover the whole sample, think block included


# ------------------------------------------------------------------ scripted turns

def test_scripted_reasoning_round_trip(think_client, engine, teacher_forced):
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Check."}]
    for turn in THINK_SCRIPT:
        data = post_chat(think_client, model="think", messages=messages, tools=[BASH_TOOL], logprobs=True,
                         return_token_ids=True)
        choice = data["choices"][0]
        msg, ids, prompt = choice["message"], choice["token_ids"], data["prompt_token_ids"]
        assert msg["reasoning"] == turn["reasoning"]
        assert msg["content"] == turn.get("content")
        got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg.get("tool_calls", [])]
        assert got == [(c["name"], c["arguments"]) for c in turn.get("tool_calls", [])]
        assert choice["finish_reason"] == ("tool_calls" if turn.get("tool_calls") else "stop")
        # The ids are the template's rendering of that assistant turn, think block included.
        assistant = {"role": "assistant", "content": turn.get("content"), "reasoning_content": turn["reasoning"]}
        if turn.get("tool_calls"):
            assistant["tool_calls"] = [{"type": "function", "function": c} for c in turn["tool_calls"]]
        full = engine.tokenize_chat(messages + [assistant], [BASH_TOOL], add_generation_prompt=False)
        assert prompt + ids == full[: len(prompt) + len(ids)] and full[len(prompt) + len(ids):] == engine.tokenize_text(
            "\n", add_special_tokens=False)
        assert engine.decode(ids).startswith("<think>\n" + turn["reasoning"] + "\n</think>\n\n")
        # Logprobs cover every sampled token, the think block too.
        lp = teacher_forced(prompt + ids)
        content = choice["logprobs"]["content"]
        assert len(content) == len(ids)
        for j, (tid, entry) in enumerate(zip(ids, content)):
            assert abs(entry["logprob"] - lp[len(prompt) + j - 1, tid].item()) <= TOL
        # Replaying the response (vLLM's `reasoning` name) reproduces prompt + ids as the next prefix.
        replay = {"role": "assistant", "content": msg["content"], "reasoning": msg["reasoning"]}
        if msg.get("tool_calls"):
            replay["tool_calls"] = msg["tool_calls"]
        messages = messages + [replay]
        nxt = engine.tokenize_chat(messages, [BASH_TOOL], add_generation_prompt=False)
        assert nxt[: len(prompt) + len(ids)] == prompt + ids
        for c in msg.get("tool_calls", []):
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": "a.py b.py"})


def test_script_reasoning_validation():
    pol = ScriptedPolicy.from_obj([{"reasoning": "why", "content": "ok"}])
    assert pol.turns[0].reasoning == "why" and pol.turns[0].as_message()["reasoning_content"] == "why"
    assert "reasoning_content" not in ScriptedPolicy.from_obj([{"reasoning": "", "content": "ok"}]).turns[0].as_message()
    with pytest.raises(ScriptError, match="turn 0: reasoning must be a string"):
        ScriptedPolicy.from_obj([{"reasoning": ["x"], "content": "ok"}])
    with pytest.raises(ScriptError, match="turn 0: needs"):
        ScriptedPolicy.from_obj([{"reasoning": "only thinking"}])
