"""Per-server chat-template override (vLLM's --chat-template) and the shipped history-stripping template."""

import json
import sys
from pathlib import Path

import pytest

import infra.refserver
from infra.refserver import ModelEngine, ScriptedPolicy, create_app
from infra.refserver.tiny_model import TEMPLATE_PATH

from .conftest import BASH_TOOL
from .test_reasoning import HISTORY, THINK_SCRIPT

STRIP_PATH = Path(infra.refserver.__file__).with_name("templates") / "strip_history_reasoning.jinja"
STRIP = STRIP_PATH.read_text(encoding="utf-8")
DEFAULT = TEMPLATE_PATH.read_text(encoding="utf-8")
# A template unlike the built-in one in every respect, to show the override replaces it entirely.
BRACKETS = ("{%- for m in messages -%}[{{ m.role }}]{{ m.content or '' }}\n{%- endfor -%}"
            "{%- if add_generation_prompt -%}[assistant]{%- endif -%}")


# Conversations without any reasoning, covering every branch of the templates.
NO_REASONING = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
     {"role": "assistant", "content": "hello"}],
    [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]},
     {"role": "assistant", "content": "ok", "reasoning_content": "", "reasoning": None}],
    [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Run it."},
     {"role": "assistant", "content": "Running.", "tool_calls": [
         {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}},
         {"type": "function", "function": {"name": "bash", "arguments": '{"command":  "pwd"}'}}]},
     {"role": "tool", "content": "a.py"}, {"role": "tool", "content": "/w"},
     {"role": "assistant", "content": None, "tool_calls": [{"name": "bash", "arguments": {"command": "pytest"}}]},
     {"role": "tool", "content": "1 passed"}, {"role": "user", "content": "Thanks ✓"}],
]


def as_vllm_passes(messages):
    """Messages as vLLM hands them to the template: tool-call argument strings parsed to objects."""
    out = json.loads(json.dumps(messages))
    for m in out:
        for call in m.get("tool_calls") or []:
            fn = call.get("function", call)
            if isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.loads(fn["arguments"])
    return out


def post(client, path, **body):
    r = client.post(path, data=json.dumps(body), content_type="application/json")
    assert r.status_code == 200, r.get_json()
    return r.get_json()


def render(tok, messages, template, tools=None, gen=True, **kw):
    return tok.apply_chat_template(messages, tools=tools, add_generation_prompt=gen, tokenize=False,
                                   chat_template=template, **kw)


def independent_ids(tok, messages, template, tools=None, gen=True, **kw):
    return tok(render(tok, messages, template, tools, gen, **kw), add_special_tokens=False).input_ids


def strip_reasoning(messages):
    return [{k: v for k, v in m.items() if k not in ("reasoning_content", "reasoning")} for m in messages]


@pytest.fixture(scope="module")
def strip_engine(model_dir):
    return ModelEngine.load(model_dir, num_threads=2, chat_template=STRIP)


@pytest.fixture(scope="module")
def brackets_engine(model_dir):
    return ModelEngine.load(model_dir, num_threads=2, chat_template=BRACKETS)


def think_app(engine):
    return create_app(engine, policies={"think": ScriptedPolicy.from_obj(THINK_SCRIPT, name="think")})


# ------------------------------------------------------------------ engine and server

def test_default_is_the_builtin_template(engine, ref_tokenizer):
    assert engine.chat_template is None
    assert ref_tokenizer.chat_template == DEFAULT
    for msgs in NO_REASONING + [HISTORY]:
        assert engine.render_chat(msgs, [BASH_TOOL]) == ref_tokenizer.apply_chat_template(
            as_vllm_passes(msgs), tools=[BASH_TOOL], add_generation_prompt=True, tokenize=False)
    # The built-in template given as an override changes nothing.
    same = ModelEngine(engine.tokenizer, engine.model, max_model_len=engine.max_model_len, chat_template=DEFAULT)
    assert same.tokenize_chat(HISTORY, [BASH_TOOL]) == engine.tokenize_chat(HISTORY, [BASH_TOOL])


@pytest.mark.parametrize("name", ["strip", "brackets"])
def test_override_sets_prompt_token_ids(name, strip_engine, brackets_engine, engine, ref_tokenizer):
    over, template = (strip_engine, STRIP) if name == "strip" else (brackets_engine, BRACKETS)
    assert over.chat_template == template
    client = create_app(over).test_client()
    for kw in ({}, {"enable_thinking": False}):
        data = post(client, "/v1/chat/completions", messages=HISTORY, tools=[BASH_TOOL], max_tokens=1, seed=0,
                    return_token_ids=True, chat_template_kwargs=kw)
        expected = independent_ids(ref_tokenizer, HISTORY, template, [BASH_TOOL], **kw)
        assert data["prompt_token_ids"] == expected
        assert expected != engine.tokenize_chat(HISTORY, [BASH_TOOL], chat_template_kwargs=kw)
    # The request still cannot swap the template itself.
    r = client.post("/v1/chat/completions", content_type="application/json", data=json.dumps(
        {"messages": HISTORY, "max_tokens": 1, "chat_template_kwargs": {"chat_template": DEFAULT}}))
    assert r.status_code == 400


@pytest.mark.parametrize("bad", ["", "  \n", b"{{ messages }}"])
def test_override_must_be_template_text(engine, bad):
    with pytest.raises(ValueError, match="chat_template"):
        ModelEngine(engine.tokenizer, engine.model, max_model_len=64, chat_template=bad)


def test_tokenize_chat_form_honours_override(strip_engine, brackets_engine, engine, ref_tokenizer):
    for over, template in ((strip_engine, STRIP), (brackets_engine, BRACKETS)):
        client = create_app(over).test_client()
        for gen in (True, False):
            data = post(client, "/tokenize", messages=HISTORY[:5], tools=[BASH_TOOL], add_generation_prompt=gen)
            expected = independent_ids(ref_tokenizer, HISTORY[:5], template, [BASH_TOOL], gen)
            assert data["tokens"] == expected and data["count"] == len(expected)
            default = post(create_app(engine).test_client(), "/tokenize", messages=HISTORY[:5], tools=[BASH_TOOL],
                           add_generation_prompt=gen)
            assert default["tokens"] != expected
    # The prompt form is untouched by the chat template.
    prompt = post(create_app(brackets_engine).test_client(), "/tokenize", prompt="[user]hi")
    assert prompt["tokens"] == ref_tokenizer("[user]hi").input_ids


# ------------------------------------------------------------------ the stripping template

def test_strip_template_drops_history_reasoning_keeps_last(ref_tokenizer):
    out = render(ref_tokenizer, HISTORY[1:5], STRIP, gen=False)
    assert out == (
        "<|im_start|>user\nList the files.<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nREADME.md\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\nOne file.\n\nShort answer.\n</think>\n\nThere is a README.<|im_end|>\n")
    # Once any message follows, no assistant turn keeps its reasoning.
    full = render(ref_tokenizer, HISTORY, STRIP, tools=[BASH_TOOL])
    assert "<think>" not in full
    assert full == render(ref_tokenizer, strip_reasoning(HISTORY), DEFAULT, tools=[BASH_TOOL])
    # Exactly: history reasoning removed, the last message's reasoning kept, as the default renders it.
    for k in range(1, len(HISTORY) + 1):
        msgs = HISTORY[:k]
        expected = strip_reasoning(msgs[:-1]) + [msgs[-1]]
        for gen, kw in ((False, {}), (True, {}), (True, {"enable_thinking": False})):
            assert render(ref_tokenizer, msgs, STRIP, [BASH_TOOL], gen, **kw) == render(
                ref_tokenizer, expected, DEFAULT, [BASH_TOOL], gen, **kw)
    # continue_final_message: the final assistant message keeps its think block.
    cont = render(ref_tokenizer, HISTORY[:5], STRIP, gen=False, continue_final_message=True)
    assert cont.endswith("<think>\nOne file.\n\nShort answer.\n</think>\n\nThere is a README.")
    assert cont.count("<think>") == 1


@pytest.mark.parametrize("conv", range(len(NO_REASONING)))
@pytest.mark.parametrize("tools", [None, [BASH_TOOL]])
def test_without_reasoning_both_templates_are_byte_identical(ref_tokenizer, strip_engine, engine, conv, tools):
    msgs = NO_REASONING[conv]
    cases = [(True, {}), (False, {}), (True, {"enable_thinking": False}), (True, {"enable_thinking": True})]
    for gen, kw in cases:
        a = render(ref_tokenizer, msgs, DEFAULT, tools, gen, **kw)
        assert a == render(ref_tokenizer, msgs, STRIP, tools, gen, **kw)
        # The engines render what vLLM would pass the template (argument strings parsed).
        assert strip_engine.render_chat(msgs, tools, gen, chat_template_kwargs=kw) == engine.render_chat(
            msgs, tools, gen, chat_template_kwargs=kw) == render(
            ref_tokenizer, as_vllm_passes(msgs), DEFAULT, tools, gen, **kw)
    if msgs[-1]["role"] == "assistant":
        assert render(ref_tokenizer, msgs, DEFAULT, tools, False, continue_final_message=True) == render(
            ref_tokenizer, msgs, STRIP, tools, False, continue_final_message=True)


# ------------------------------------------------------------------ scripted turns: context drift

def play(client, messages):
    data = post(client, "/v1/chat/completions", model="think", messages=messages, tools=[BASH_TOOL],
                logprobs=True, return_token_ids=True)
    choice = data["choices"][0]
    lps = [e["logprob"] for e in choice["logprobs"]["content"]]
    return data["prompt_token_ids"], choice["token_ids"], choice["message"], lps


def replay(msg):
    out = {"role": "assistant", "content": msg["content"], "reasoning": msg["reasoning"]}
    if msg.get("tool_calls"):
        out["tool_calls"] = msg["tool_calls"]
    return out


def test_scripted_reasoning_turn_drifts_under_strip_template(engine, strip_engine, teacher_forced):
    start = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Check."}]
    runs = {}
    for name, eng in (("default", engine), ("strip", strip_engine)):
        client = think_app(eng).test_client()
        p1, r1, msg, _ = play(client, start)
        assert msg["reasoning"] == THINK_SCRIPT[0]["reasoning"] and len(msg["tool_calls"]) == 1
        # The sampled turn contains its think block under either template (it is the last message).
        assert eng.decode(r1).startswith("<think>\n" + THINK_SCRIPT[0]["reasoning"] + "\n</think>\n\n<tool_call>")
        messages = start + [replay(msg), {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"],
                                          "content": "a.py b.py"}]
        p2, r2, msg2, lps2 = play(client, messages)
        assert eng.decode(r2).startswith("<think>\n" + THINK_SCRIPT[1]["reasoning"] + "\n</think>\n\n")
        assert msg2["content"] == THINK_SCRIPT[1]["content"]
        # Logprobs are teacher-forced on the prompt actually served (the re-rendered one under strip).
        lp = teacher_forced(p2 + r2)
        assert len(lps2) == len(r2)
        assert all(abs(v - lp[len(p2) + j - 1, t].item()) <= 1e-4 for j, (t, v) in enumerate(zip(r2, lps2)))
        runs[name] = (p1, r1, p2)

    (dp1, dr1, dp2), (sp1, sr1, sp2) = runs["default"], runs["strip"]
    # The first request is the same under both: no history reasoning yet, same scripted turn.
    assert (sp1, sr1) == (dp1, dr1)
    # Default: the next prompt extends previous prompt + sampled ids (no drift).
    assert dp2[: len(dp1) + len(dr1)] == dp1 + dr1
    # Strip: the next prompt re-renders that turn without its think block (drift).
    assert sp2[: len(sp1) + len(sr1)] != sp1 + sr1
    assert sp2[: len(sp1)] == sp1
    think = strip_engine.tokenize_text("<think>\n" + THINK_SCRIPT[0]["reasoning"] + "\n</think>\n\n",
                                       add_special_tokens=False)
    assert sr1[: len(think)] == think
    assert sp2 == sp1 + sr1[len(think):] + dp2[len(dp1) + len(dr1):]
    assert THINK_SCRIPT[0]["reasoning"] not in strip_engine.decode(sp2, skip_special_tokens=False)


# ------------------------------------------------------------------ wsgi

@pytest.mark.parametrize("value", ["", str(STRIP_PATH)])
def test_wsgi_reads_chat_template_from_env(model_dir, monkeypatch, ref_tokenizer, value):
    monkeypatch.setenv("POLAR_REFSERVER_MODEL_DIR", str(model_dir))
    monkeypatch.setenv("POLAR_REFSERVER_POLICIES", "{}")
    monkeypatch.setenv("POLAR_REFSERVER_CHAT_TEMPLATE", value)
    monkeypatch.delitem(sys.modules, "infra.refserver.wsgi", raising=False)
    import infra.refserver.wsgi as wsgi

    try:
        data = post(wsgi.app.test_client(), "/tokenize", messages=HISTORY, tools=[BASH_TOOL])
        template = STRIP if value else DEFAULT
        assert data["tokens"] == independent_ids(ref_tokenizer, HISTORY, template, [BASH_TOOL])
        assert wsgi._chat_template == (STRIP if value else None)
    finally:
        sys.modules.pop("infra.refserver.wsgi", None)
