"""The proxy's token-in paths (proxy/upstream/token_prompts.py) against the reference server.

For one prompt, each path's answer -- read back by the engine dialect (``Engine.extract``) and the
providers (``turn_from_chat``) exactly as a chat answer is -- equals the engine's own chat answer:
ids, logprobs, tokens, content, reasoning, tool calls, finish. Scripts drive tool calls and
reasoning (the tiny model never writes them), on /v1/completions and /generate too. The proxy's
parser is also checked against the server's own parser on texts the server's template renders."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.refserver import ScriptedPolicy, create_app
from infra.refserver.app import parse_chat_output
from proxy import upstream
from proxy.providers.base import turn_from_chat
from proxy.upstream import assistant_text
from proxy.upstream.token_prompts import TokenInPath, token_in_answer, token_in_request

from .conversations import MIX_SCRIPT, TOOLS, conversation

SAME = 1e-6
VLLM, SGLANG = upstream.create("vllm"), upstream.create("sglang")


@pytest.fixture(scope="module")
def vl(engine):
    return create_app(engine, default_max_tokens=16,
                      policies={"mix": ScriptedPolicy.from_obj(MIX_SCRIPT, name="mix")}).test_client()


@pytest.fixture(scope="module")
def sg_apps(engine):
    """SGLang dialect: /generate names no model, so one app whose /generate plays "mix", one where
    the tiny model samples."""
    policies = {"mix": ScriptedPolicy.from_obj(MIX_SCRIPT, name="mix")}
    return {"mix": create_app(engine, dialect="sglang", policies=policies, generate_policy="mix").test_client(),
            "tiny": create_app(engine, dialect="sglang", policies=policies).test_client()}


def post(client, path, body, status=200):
    r = client.post(path, data=json.dumps(body), content_type="application/json")
    assert r.status_code == status, r.get_json()
    return r.get_json()


def assert_reads_alike(engine_dialect, chat_answer, token_answer):
    a, b = engine_dialect.extract(chat_answer), engine_dialect.extract(token_answer)
    assert (a.prompt_ids, a.response_ids, a.response_tokens) == (b.prompt_ids, b.response_ids, b.response_tokens)
    assert max((abs(x - y) for x, y in zip(a.response_logprobs, b.response_logprobs)), default=0.0) <= SAME
    assert (a.finish_reason, a.stop_reason) == (b.finish_reason, b.stop_reason)
    ta, tb = turn_from_chat(chat_answer, "m"), turn_from_chat(token_answer, "m")
    assert (ta.content, ta.reasoning, ta.finish_reason, ta.stop_reason) == \
        (tb.content, tb.reasoning, tb.finish_reason, tb.stop_reason)
    assert [(c.name, json.loads(c.arguments)) for c in ta.tool_calls] == \
        [(c.name, json.loads(c.arguments)) for c in tb.tool_calls]
    assert [c.arguments for c in ta.tool_calls] == [c.arguments for c in tb.tool_calls]
    assert (ta.prompt_tokens, ta.completion_tokens) == (tb.prompt_tokens, tb.completion_tokens)
    for x, y in zip(ta.logprobs or [], tb.logprobs or []):
        assert (x["token"], x["bytes"]) == (y["token"], y["bytes"])
        alternatives = [t["token"] for t in x["top_logprobs"]]
        if len(set(alternatives)) < len(alternatives):
            # Two alternatives with one text (lone UTF-8 bytes decode to U+FFFD): vLLM's completions
            # logprobs are keyed by text and keep one of them, so the lists cannot agree (docs/token-in.md).
            continue
        assert alternatives == [t["token"] for t in y["top_logprobs"]]
        assert max((abs(p["logprob"] - q["logprob"]) for p, q in zip(x["top_logprobs"], y["top_logprobs"])),
                   default=0.0) <= SAME
    # Same keys where the engine's chat answer has them (ids and timestamps aside), so the capture
    # code finds every field it reads.
    ca, cb = chat_answer["choices"][0], token_answer["choices"][0]
    assert set(ca) <= set(cb) and set(ca["message"]) == set(cb["message"])


def chat_request(messages, model, with_tools, seed, temperature):
    chat = {"model": model, "messages": messages, "max_tokens": 48, "seed": seed, "temperature": temperature}
    if with_tools:
        chat["tools"] = TOOLS
    return chat


_cases = dict(messages=conversation(), model=st.sampled_from(["tiny", "mix"]), with_tools=st.booleans(),
              seed=st.integers(0, 2**31), temperature=st.sampled_from([0.0, 1.0]), k=st.sampled_from([0, 2]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**_cases)
def test_vllm_completions_path_reads_as_the_chat_answer(vl, messages, model, with_tools, seed, temperature, k):
    chat = chat_request(messages, model, with_tools, seed, temperature)
    answer = post(vl, "/v1/chat/completions", VLLM.prepare(chat, top_logprobs=k))
    ids = answer["prompt_token_ids"]
    call = token_in_request(TokenInPath.COMPLETIONS, chat, ids, engine=VLLM, top_logprobs=k)
    assert call.path == "/v1/completions" and call.body["prompt"] == ids
    raw = post(vl, call.path, call.body)
    assert_reads_alike(VLLM, answer, token_in_answer(TokenInPath.COMPLETIONS, chat, ids, raw, top_logprobs=k))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**_cases)
def test_sglang_generate_path_reads_as_the_chat_answer(sg_apps, messages, model, with_tools, seed, temperature, k):
    client = sg_apps[model]
    chat = chat_request(messages, model, with_tools, seed, temperature)
    answer = post(client, "/v1/chat/completions", SGLANG.prepare(chat, top_logprobs=k))
    ids = answer["choices"][0]["prompt_token_ids"]
    call = token_in_request(TokenInPath.SGLANG_GENERATE, chat, ids, engine=SGLANG, top_logprobs=k)
    assert call.path == "/generate" and call.body["input_ids"] == ids and "model" not in call.body
    raw = post(client, call.path, call.body)
    token_answer = token_in_answer(TokenInPath.SGLANG_GENERATE, chat, ids, raw, top_logprobs=k)
    assert_reads_alike(SGLANG, answer, token_answer)
    ma, mb = answer["choices"][0]["meta_info"], token_answer["choices"][0]["meta_info"]
    assert ma["finish_reason"] == mb["finish_reason"]
    assert [t[1:] for t in ma["output_token_logprobs"]] == [t[1:] for t in mb["output_token_logprobs"]]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**_cases)
def test_chat_routes_with_ids_read_as_the_chat_answer(vl, sg_apps, messages, model, with_tools, seed, temperature,
                                                      k):
    chat = chat_request(messages, model, with_tools, seed, temperature)
    for client, dialect, path in ((vl, VLLM, TokenInPath.CHAT_TOKENS),
                                  (sg_apps["tiny"], SGLANG, TokenInPath.CHAT_INPUT_IDS)):
        answer = post(client, "/v1/chat/completions", dialect.prepare(chat, top_logprobs=k))
        ids = dialect.extract(answer).prompt_ids
        call = token_in_request(path, chat, ids, engine=dialect, top_logprobs=k)
        assert_reads_alike(dialect, answer, token_in_answer(path, chat, ids, post(client, call.path, call.body)))


def test_scripted_turns_on_token_prompts(vl, sg_apps, engine):
    """The three tool-call shapes of the script arrive through the raw-text paths as tool calls."""
    messages = [{"role": "user", "content": "Fix it."}]
    chat = {"model": "mix", "messages": messages, "tools": TOOLS, "max_tokens": 200}
    for client, dialect, path in ((vl, VLLM, TokenInPath.COMPLETIONS), (sg_apps["mix"], SGLANG,
                                                                        TokenInPath.SGLANG_GENERATE)):
        history = list(messages)
        seen = []
        for _ in range(3):
            ids = engine.tokenize_chat(history, TOOLS)
            call = token_in_request(path, {**chat, "messages": history}, ids, engine=dialect)
            answer = token_in_answer(path, chat, ids, post(client, call.path, call.body))
            turn = turn_from_chat(answer, "mix")
            seen.append((turn.reasoning, turn.content, [c.name for c in turn.tool_calls], turn.finish_reason))
            calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                     for c in turn.tool_calls]
            history += [{"role": "assistant", "content": turn.content, "reasoning_content": turn.reasoning,
                         **({"tool_calls": calls} if calls else {})}]
            history += ([{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls] or
                        [{"role": "user", "content": "and?"}])
        assert seen == [("Look first.", None, ["bash"], "tool_calls"), (None, "Two edits.", ["edit", "bash"],
                        "tool_calls"), ("Green now.", "All tests pass.", [], "stop")], dialect.name


def test_length_cut_mid_tool_call_stays_text(vl, engine):
    messages = [{"role": "user", "content": "Go."}]
    chat = {"model": "mix", "messages": messages, "tools": TOOLS, "max_tokens": 12}
    ids = engine.tokenize_chat(messages, TOOLS)
    normal = post(vl, "/v1/chat/completions", VLLM.prepare(chat))
    call = token_in_request(TokenInPath.COMPLETIONS, chat, ids, engine=VLLM)
    answer = token_in_answer(TokenInPath.COMPLETIONS, chat, ids, post(vl, call.path, call.body))
    assert_reads_alike(VLLM, normal, answer)
    turn = turn_from_chat(answer, "mix")
    # Cut inside the call: the think block is reasoning, the half call stays text, finish length.
    assert turn.finish_reason == "length" and not turn.tool_calls and turn.reasoning == "Look first."
    assert turn.content.startswith("<tool_call>\n{") and len(answer["choices"][0]["token_ids"]) == 12


# --- the proxy's parser against the server's ---------------------------------------------------

def _rendered_body(engine, message):
    """The text the template renders for an assistant message, i.e. what a model trained on it emits."""
    probe = [{"role": "user", "content": "x"}]
    a = engine.render_chat(probe, add_generation_prompt=True)
    b = engine.render_chat(probe + [message], add_generation_prompt=False)
    return b[len(a):-len("<|im_end|>\n")]


_piece = st.sampled_from(["<tool_call>", "</tool_call>", "<think>", "</think>", "\n", " ", "{", "}", '"name"',
                          '"arguments"', ":", ",", '"bash"', "[1]", "null", "x", "é", "{\"name\": \"bash\"}"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=conversation(max_assistant_turns=3), junk=st.lists(_piece, max_size=12).map("".join),
       parse_tools=st.booleans(), cut=st.integers(0, 400))
def test_parser_equals_the_servers(engine, messages, junk, parse_tools, cut):
    texts = [junk]
    for m in messages:
        if m["role"] == "assistant":
            body = _rendered_body(engine, m)
            texts += [body, body[:cut], body + junk]  # whole, cut off anywhere, trailing junk
    for text in texts:
        reasoning, content, calls = parse_chat_output(text, parse_tools)
        ours = assistant_text.parse_assistant_text(text, parse_tools=parse_tools)
        assert (ours.reasoning, ours.content) == (reasoning, content), text
        assert [(c.name, c.arguments) for c in ours.tool_calls] == \
            [(c["function"]["name"], c["function"]["arguments"]) for c in calls], text


def test_parser_reads_back_what_the_template_renders(engine):
    msg = {"role": "assistant", "content": "Two at once.", "reasoning_content": "Plan: edit, then test.",
           "tool_calls": [{"type": "function", "function": {"name": "edit", "arguments": {"path": "é.py", "new": "✓"}}},
                          {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}]}
    parsed = assistant_text.parse_assistant_text(_rendered_body(engine, msg), parse_tools=True)
    assert parsed.reasoning == "Plan: edit, then test." and parsed.content == "Two at once."
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [
        ("edit", '{"path": "é.py", "new": "✓"}'), ("bash", '{"command": "ls"}')]
