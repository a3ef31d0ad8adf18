"""Token-in chat: ``/v1/chat/completions/tokens`` (vLLM dialect) and SGLang's ``input_ids``.

Given the ids the template renders, the answer is the normal chat answer; given other ids, the
engine samples after those (echo + teacher forcing say so); bad ids are vLLM-style 400s."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.refserver import ModelEngine, ScriptedPolicy, create_app
from infra.refserver.dialects import TOKEN_IDS_FIELD, TOKENS_ROUTE

from .conftest import SCRIPT
from .conversations import MIX_SCRIPT, TOOLS, conversation

SAME = 1e-6  # two answers of one server for one prompt
TOL = 1e-4  # against the independent teacher-forced pass (as in test_chat.py)


@pytest.fixture(scope="module")
def vl(engine):
    return create_app(engine, default_max_tokens=16, policies={
        "mix": ScriptedPolicy.from_obj(MIX_SCRIPT, name="mix"),
        "script3": ScriptedPolicy.from_obj(SCRIPT, name="script3")}).test_client()


@pytest.fixture(scope="module")
def sg(engine):
    return create_app(engine, dialect="sglang", default_max_tokens=16,
                      policies={"mix": ScriptedPolicy.from_obj(MIX_SCRIPT, name="mix")}).test_client()


def post(client, path, body, status=200):
    r = client.post(path, data=json.dumps(body), content_type="application/json")
    assert r.status_code == status, r.get_json()
    return r.get_json()


def calls_of(message):
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls") or []]


def assert_same_answer(a, b, *, ids_key="token_ids", prompt_of=lambda d: d["prompt_token_ids"]):
    ca, cb = a["choices"][0], b["choices"][0]
    assert prompt_of(a) == prompt_of(b)
    assert ca[ids_key] == cb[ids_key]
    la, lb = ca["logprobs"]["content"], cb["logprobs"]["content"]
    assert [e["token"] for e in la] == [e["token"] for e in lb]
    assert max((abs(x["logprob"] - y["logprob"]) for x, y in zip(la, lb)), default=0.0) <= SAME
    for x, y in zip(la, lb):
        assert [t["token"] for t in x["top_logprobs"]] == [t["token"] for t in y["top_logprobs"]]
    ma, mb = ca["message"], cb["message"]
    assert (ma["content"], calls_of(ma)) == (mb["content"], calls_of(mb))
    assert ma.get("reasoning", ma.get("reasoning_content")) == mb.get("reasoning", mb.get("reasoning_content"))
    assert (ca["finish_reason"], ca.get("stop_reason"), ca.get("matched_stop")) == \
        (cb["finish_reason"], cb.get("stop_reason"), cb.get("matched_stop"))
    assert a["usage"] == b["usage"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=conversation(), model=st.sampled_from(["tiny", "mix"]), with_tools=st.booleans(),
       seed=st.integers(0, 2**31), temperature=st.sampled_from([0.0, 0.7, 1.3]))
def test_rendered_ids_give_the_chat_answer(vl, messages, model, with_tools, seed, temperature):
    body = {"model": model, "messages": messages, "max_tokens": 48, "seed": seed, "temperature": temperature,
            "logprobs": True, "top_logprobs": 2, "return_token_ids": True}
    if with_tools:
        body["tools"] = TOOLS
    normal = post(vl, "/v1/chat/completions", body)
    tokens = post(vl, TOKENS_ROUTE, {**body, TOKEN_IDS_FIELD: normal["prompt_token_ids"]})
    assert_same_answer(normal, tokens)


def test_scripted_tool_calls_and_reasoning_through_tokens(vl, engine):
    msgs = [{"role": "user", "content": "Fix the test."}]
    body = {"model": "mix", "messages": msgs, "tools": TOOLS, "logprobs": True, "return_token_ids": True}
    first = post(vl, TOKENS_ROUTE, {**body, TOKEN_IDS_FIELD: engine.tokenize_chat(msgs, TOOLS)})
    msg = first["choices"][0]["message"]
    assert msg["reasoning"] == "Look first." and msg["content"] is None
    assert calls_of(msg) == [("bash", {"command": "ls -la"})] and first["choices"][0]["finish_reason"] == "tool_calls"
    # The script follows the messages, not the ids: turn 1 (two parallel calls) for one assistant turn.
    msgs2 = msgs + [{"role": "assistant", "content": None, "tool_calls": msg["tool_calls"]},
                    {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": "a.py"}]
    second = post(vl, TOKENS_ROUTE, {**body, "messages": msgs2, TOKEN_IDS_FIELD: engine.tokenize_chat(msgs2, TOOLS)})
    assert [name for name, _ in calls_of(second["choices"][0]["message"])] == ["edit", "bash"]


def _other_rendering(engine, messages):
    """The same conversation as a client-side renderer might build it: the tool call's arguments
    kept compact and the reasoning dropped, i.e. not what the server's template would render."""
    text = ("<|im_start|>system\nYou are a coding agent.<|im_end|>\n<|im_start|>user\nList the files.<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\":\"ls\"}}\n"
            "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nREADME.md\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n")
    return engine.tokenize_text(text, add_special_tokens=False)


CONVO = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "List the files."},
    {"role": "assistant", "content": None, "reasoning_content": "Start with ls.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "README.md"},
]


@pytest.mark.parametrize("model", ["tiny", "script3"])
def test_other_ids_are_the_context_sampled_in(vl, engine, teacher_forced, model):
    rendered = engine.tokenize_chat(CONVO)
    other = _other_rendering(engine, CONVO)
    assert other != rendered
    body = {"model": model, "messages": CONVO, "max_tokens": 24, "seed": 5, "ignore_eos": model == "tiny",
            "logprobs": True, "return_token_ids": True}
    data = post(vl, TOKENS_ROUTE, {**body, TOKEN_IDS_FIELD: other})
    assert data["prompt_token_ids"] == other and data["usage"]["prompt_tokens"] == len(other)
    out = data["choices"][0]["token_ids"]
    got = [e["logprob"] for e in data["choices"][0]["logprobs"]["content"]]
    assert len(out) == len(got) > 0
    in_other = teacher_forced(other + out)
    assert max(abs(v - in_other[len(other) + i - 1][t].item()) for i, (t, v) in enumerate(zip(out, got))) <= TOL
    # ... and not the rendered prompt's: the context is the one the ids say.
    in_rendered = teacher_forced(rendered + out)
    assert max(abs(v - in_rendered[len(rendered) + i - 1][t].item()) for i, (t, v) in enumerate(zip(out, got))) > 1e-3


def test_stock_chat_route_ignores_the_ids_field(vl, engine):
    """Why the token-in chat has a route of its own: vLLM's chat route ignores unknown fields, so
    ids sent there are silently dropped and the messages re-rendered (here too, as in vLLM)."""
    other = _other_rendering(engine, CONVO)
    data = post(vl, "/v1/chat/completions", {"messages": CONVO, "max_tokens": 2, "return_token_ids": True,
                                             TOKEN_IDS_FIELD: other})
    assert data["prompt_token_ids"] == engine.tokenize_chat(CONVO) != other


def test_prompt_logprobs_are_of_the_given_ids(vl, engine, teacher_forced):
    other = _other_rendering(engine, CONVO)
    data = post(vl, TOKENS_ROUTE, {"messages": CONVO, "max_tokens": 1, "prompt_logprobs": 0, TOKEN_IDS_FIELD: other})
    entries = data["prompt_logprobs"]
    assert len(entries) == len(other) and entries[0] is None
    lp = teacher_forced(other)
    assert max(abs(e[str(t)]["logprob"] - lp[i][t].item()) for i, (e, t) in enumerate(zip(entries[1:], other[1:]))) <= TOL


@pytest.mark.parametrize("ids, message", [
    (None, "Field required: 'prompt_token_ids'"),
    ([], "must be a non-empty list of token ids"),
    (["1", 2], "must be a list of integers"),
    ([1.5, 2], "must be a list of integers"),
    ([True, 2], "must be a list of integers"),
    ("1 2 3", "must be a list of integers"),
    ([5, 10**9], "out of vocabulary"),
    ([5, -1], "out of vocabulary"),
])
def test_bad_ids_are_400s(vl, ids, message):
    body = {"messages": CONVO, "max_tokens": 2}
    if ids is not None:
        body[TOKEN_IDS_FIELD] = ids
    err = post(vl, TOKENS_ROUTE, body, status=400)["error"]
    assert message in err["message"] and err["type"] == "BadRequestError" and err["code"] == 400


def test_context_and_request_errors_as_on_the_chat_route(vl, engine):
    ids = engine.tokenize_chat(CONVO)
    err = post(vl, TOKENS_ROUTE, {"messages": CONVO, "max_tokens": engine.max_model_len, TOKEN_IDS_FIELD: ids},
               status=400)["error"]
    assert f"maximum context length is {engine.max_model_len} tokens" in err["message"]
    assert f"({len(ids)} in the messages" in err["message"]
    # The messages are still validated (and rendered) exactly as the chat route does.
    for bad in ({"messages": []}, {"messages": CONVO, "tools": []}, {"messages": CONVO, "n": 2},
                {"messages": [{"role": "assistant", "tool_calls": [
                    {"type": "function", "function": {"name": "bash", "arguments": "{not json"}}]}]}):
        normal = post(vl, "/v1/chat/completions", bad, status=400)["error"]["message"]
        assert post(vl, TOKENS_ROUTE, {**bad, TOKEN_IDS_FIELD: ids}, status=400)["error"]["message"] == normal
    r = vl.post(TOKENS_ROUTE, data=b"{oops", content_type="application/json")
    assert r.status_code == 400 and "Invalid JSON" in r.get_json()["error"]["message"]


# --- SGLang dialect: input_ids on its own chat route --------------------------------------------

@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=conversation(), model=st.sampled_from(["tiny", "mix"]), seed=st.integers(0, 2**31))
def test_sglang_input_ids_give_the_chat_answer(sg, messages, model, seed):
    body = {"model": model, "messages": messages, "tools": TOOLS, "max_tokens": 48, "seed": seed,
            "logprobs": True, "top_logprobs": 1, "return_prompt_token_ids": True, "return_meta_info": True,
            "return_token_ids": True}
    normal = post(sg, "/v1/chat/completions", body)
    ids = normal["choices"][0]["prompt_token_ids"]
    tokens = post(sg, "/v1/chat/completions", {**body, "input_ids": ids})
    assert_same_answer(normal, tokens, ids_key="response_token_ids",
                       prompt_of=lambda d: d["choices"][0]["prompt_token_ids"])


def test_sglang_input_ids_other_context_and_errors(sg, engine):
    other = _other_rendering(engine, CONVO)
    data = post(sg, "/v1/chat/completions", {"messages": CONVO, "max_tokens": 2, "return_prompt_token_ids": True,
                                             "input_ids": other})
    assert data["choices"][0]["prompt_token_ids"] == other
    error = post(sg, "/v1/chat/completions", {"messages": CONVO, "input_ids": [10**9]}, status=400)
    assert error["object"] == "error" and "out of vocabulary" in error["message"]  # SGLang's top-level error
    # No token-in route on SGLang: a client that expects one hears so instead of a re-rendering.
    assert sg.post(TOKENS_ROUTE, data=json.dumps({"messages": CONVO, TOKEN_IDS_FIELD: other}),
                   content_type="application/json").status_code == 404


# --- scripts on token-id prompts (/v1/completions, /generate) -------------------------------------

def test_turn_for_prompt_counts_assistant_turns_before_the_open_header(engine):
    policy = ScriptedPolicy.from_obj(MIX_SCRIPT, name="mix")
    history = [{"role": "user", "content": "a"}]
    assert policy.turn_for_prompt(engine.render_chat(history)) == 0
    history += [{"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    assert policy.turn_for_prompt(engine.render_chat(history)) == 1
    # Not a generation prompt (no open assistant turn), or past the script: the model samples.
    assert policy.turn_for_prompt(engine.render_chat(history, add_generation_prompt=False)) is None
    assert policy.turn_for_prompt("plain text") is None
    long = history + [{"role": "assistant", "content": "d"}, {"role": "user", "content": "e"}] * 3
    assert policy.turn_for_prompt(engine.render_chat(long)) is None


def test_completions_and_generate_play_scripts(vl, engine):
    msgs = [{"role": "user", "content": "Fix the test."}]
    ids = engine.tokenize_chat(msgs, TOOLS)
    chat = post(vl, "/v1/chat/completions", {"model": "mix", "messages": msgs, "tools": TOOLS, "logprobs": True,
                                             "return_token_ids": True})["choices"][0]
    done = post(vl, "/v1/completions", {"model": "mix", "prompt": ids, "max_tokens": None, "logprobs": 0,
                                        "return_token_ids": True})["choices"][0]
    assert done["token_ids"] == chat["token_ids"] and done["finish_reason"] == "stop"
    assert [round(v, 6) for v in done["logprobs"]["token_logprobs"]] == \
        [round(e["logprob"], 6) for e in chat["logprobs"]["content"]]
    # The completions default of 16 tokens cuts a script turn like any other answer.
    assert post(vl, "/v1/completions", {"model": "mix", "prompt": ids})["choices"][0]["finish_reason"] == "length"
    gen_app = create_app(engine, dialect="sglang", generate_policy="mix",
                         policies={"mix": ScriptedPolicy.from_obj(MIX_SCRIPT, name="mix")}).test_client()
    out = post(gen_app, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 200},
                                      "return_logprob": True, "return_text_in_logprobs": True})
    assert out["output_ids"] == chat["token_ids"]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": engine.eos_token_id}
    assert [t[2] for t in out["meta_info"]["output_token_logprobs"]] == [engine.token_text(t) for t in out["output_ids"]]
    with pytest.raises(ValueError, match="not one of the policies"):
        create_app(engine, generate_policy="nope")


def test_generate_reads_sglang_sampling_names(engine):
    client = create_app(engine, dialect="sglang").test_client()
    ids = engine.tokenize_chat([{"role": "user", "content": "hi"}])

    def run(**params):
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 12, "ignore_eos": True, **params},
                "return_logprob": True, "top_logprobs_num": 2}
        return post(client, "/generate", body)

    a, b = run(sampling_seed=3, temperature=1.5), run(seed=3, temperature=1.5)
    assert a["output_ids"] == b["output_ids"] and a["output_ids"] != run(sampling_seed=4, temperature=1.5)["output_ids"]
    tops = a["meta_info"]["output_top_logprobs"]
    assert len(tops) == 12 and all(len(t) == 2 and t[0][0] >= t[1][0] for t in tops)
    assert a["meta_info"]["output_token_logprobs"][0][2] is None  # no text unless asked
    free = run(temperature=0)["text"]
    stop = free[3:6]
    assert run(temperature=0, stop=[stop])["text"] == free[: free.index(stop)]
    assert run(temperature=0, stop=[stop], no_stop_trim=True)["text"] == free[: free.index(stop) + len(stop)]
    # An explicit null limit is the room left (SGLang's scheduler fills it), not the default 128.
    small = create_app(ModelEngine(engine.tokenizer, engine.model, max_model_len=len(ids) + 5),
                       dialect="sglang").test_client()
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": None, "ignore_eos": True}}
    assert post(small, "/generate", body)["meta_info"]["completion_tokens"] == 5
    del body["sampling_params"]["max_new_tokens"]
    # SGLang's own refusal: prompt + the default 128 reach the context
    assert post(small, "/generate", body, status=400)["message"].startswith(
        f"Requested token count exceeds the model's maximum context length of {len(ids) + 5} tokens. "
        f"You requested a total of {len(ids) + 128} tokens: {len(ids)} tokens from the input messages")
    body["sampling_params"]["max_new_tokens"] = 5  # prompt + output == context: SGLang keeps one token free
    assert "maximum context length" in post(small, "/generate", body, status=400)["message"]
    body["sampling_params"]["max_new_tokens"] = 4
    assert post(small, "/generate", body)["meta_info"]["completion_tokens"] == 4
