import json
import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.refserver import ScriptedPolicy, create_app
from infra.refserver.dialects import SGLANG_RESPONSE_IDS_FIELD as RESP_IDS

from .conftest import BASH_TOOL

TOL = 1e-4
CALL_ID_RE = re.compile(r"^call_[0-9a-f]{24}$")
SCRIPT = [
    {"reasoning": "Look before editing.", "tool_calls": [{"name": "bash", "arguments": {"command": "ls -la"}}]},
    {"content": "Done."},
]
MSGS = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "List the files."}]
# vLLM's spellings that must not leak into the SGLang dialect.
VLLM_CHOICE_KEYS = {"stop_reason", "token_ids"}
VLLM_TOP_KEYS = {"prompt_token_ids", "prompt_logprobs"}


@pytest.fixture(scope="module")
def sg(engine):
    app = create_app(engine, dialect="sglang", default_max_tokens=32,
                     policies={"think": ScriptedPolicy.from_obj(SCRIPT, name="think")})
    return app.test_client()


def post(client, path, status=200, **body):
    r = client.post(path, data=json.dumps(body), content_type="application/json")
    assert r.status_code == status, r.get_json()
    return r.get_json()


def chat(client, **body):
    body.setdefault("model", "tiny")
    return post(client, "/v1/chat/completions", **body)


def assert_no_vllm_fields(data):
    choice = data["choices"][0]
    assert not VLLM_CHOICE_KEYS & set(choice), choice.keys()
    assert not VLLM_TOP_KEYS & set(data), data.keys()
    assert "reasoning" not in choice["message"] and "reasoning_content" in choice["message"]


def test_meta_info_ids_and_logprobs_equal_teacher_forcing(sg, ref_tokenizer, teacher_forced):
    data = chat(sg, messages=MSGS, tools=[BASH_TOOL], max_tokens=20, seed=3, temperature=1.2, logprobs=True,
                top_logprobs=2, return_meta_info=True, return_token_ids=True)
    choice = data["choices"][0]
    prompt = choice["prompt_token_ids"]
    text = ref_tokenizer.apply_chat_template(MSGS, tools=[BASH_TOOL], add_generation_prompt=True, tokenize=False)
    assert prompt == ref_tokenizer(text, add_special_tokens=False).input_ids
    meta = choice["meta_info"]
    otl = meta["output_token_logprobs"]
    ids = [t for (_, t, _) in otl]
    assert choice[RESP_IDS] == ids and len(ids) == data["usage"]["completion_tokens"] > 0
    assert [text for (_, _, text) in otl] == [ref_tokenizer.decode([t]) for t in ids]
    lp = teacher_forced(prompt + ids)
    for i, (v, tid, _) in enumerate(otl):
        assert abs(v - lp[len(prompt) + i - 1, tid].item()) <= TOL
    # The OpenAI-style logprobs agree with meta_info.
    content = choice["logprobs"]["content"]
    assert [e["token"] for e in content] == [ref_tokenizer.decode([t]) for t in ids]
    assert all(abs(e["logprob"] - v) <= 1e-6 and len(e["top_logprobs"]) == 2 for e, (v, _, _) in zip(content, otl))
    assert meta["id"] == data["id"] and meta["weight_version"] == "default" and meta["cached_tokens"] == 0
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (len(prompt), len(ids))
    assert data["usage"]["prompt_tokens"] == len(prompt)
    assert data["metadata"] == {"weight_version": "default"}
    assert_no_vllm_fields(data)


def test_flags_select_fields(sg):
    base = dict(messages=MSGS, max_tokens=3, seed=0, ignore_eos=True)
    plain = chat(sg, **base)["choices"][0]
    assert not {"prompt_token_ids", RESP_IDS, "meta_info"} & set(plain)
    assert plain["logprobs"] is None and plain["message"]["tool_calls"] is None
    only_prompt = chat(sg, return_prompt_token_ids=True, **base)["choices"][0]
    assert "prompt_token_ids" in only_prompt and not {RESP_IDS, "meta_info"} & set(only_prompt)
    only_meta = chat(sg, return_meta_info=True, **base)["choices"][0]
    assert "meta_info" in only_meta and not {"prompt_token_ids", RESP_IDS} & set(only_meta)
    assert len(only_meta["meta_info"]["output_token_logprobs"]) == 3
    # vLLM-only request fields are ignored, as SGLang ignores unknown fields.
    data = chat(sg, logprobs=True, return_tokens_as_token_ids=True, prompt_logprobs=2, **base)
    assert not data["choices"][0]["logprobs"]["content"][0]["token"].startswith("token_id:")
    assert_no_vllm_fields(data)


def test_length_finish(sg):
    choice = chat(sg, messages=MSGS, max_tokens=5, seed=1, ignore_eos=True, return_meta_info=True)["choices"][0]
    assert choice["finish_reason"] == "length" and choice["matched_stop"] is None
    assert choice["meta_info"]["finish_reason"] == {"type": "length", "length": 5}


def test_matched_stop_string_and_token(sg):
    base = dict(messages=MSGS, max_tokens=30, temperature=0, ignore_eos=True, return_token_ids=True,
                return_meta_info=True)
    free = chat(sg, **base)["choices"][0]
    text, ids = free["message"]["content"], free[RESP_IDS]
    stop = text[5:8]
    cut = chat(sg, stop=[stop], **base)["choices"][0]
    assert cut["finish_reason"] == "stop" and cut["matched_stop"] == stop
    assert cut["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert cut["message"]["content"] == text[: text.index(stop)]
    target = ids[3]
    cut = chat(sg, stop_token_ids=[target], **base)["choices"][0]
    assert cut[RESP_IDS] == ids[: ids.index(target) + 1]
    assert cut["matched_stop"] == target and cut["meta_info"]["finish_reason"] == {"type": "stop", "matched": target}


def test_scripted_turns_tool_call_then_eos(sg, engine):
    data = chat(sg, model="think", messages=MSGS, tools=[BASH_TOOL], logprobs=True, return_token_ids=True,
                return_meta_info=True)
    choice = data["choices"][0]
    msg = choice["message"]
    assert msg["reasoning_content"] == SCRIPT[0]["reasoning"] and msg["content"] is None
    [call] = msg["tool_calls"]
    assert CALL_ID_RE.match(call["id"]) and call["index"] == 0 and call["type"] == "function"
    assert call["function"] == {"name": "bash", "arguments": '{"command": "ls -la"}'}
    # SGLang drops the matched stop when it turns a stop into tool_calls, in meta_info too.
    assert choice["finish_reason"] == "tool_calls" and choice["matched_stop"] is None
    assert choice["meta_info"]["finish_reason"] == {"type": "tool_calls", "matched": None}
    ids = choice[RESP_IDS]
    assistant = {"role": "assistant", "content": None, "reasoning_content": msg["reasoning_content"],
                 "tool_calls": msg["tool_calls"]}
    full = engine.tokenize_chat(MSGS + [assistant], [BASH_TOOL], add_generation_prompt=False)
    assert full[: len(choice["prompt_token_ids"]) + len(ids)] == choice["prompt_token_ids"] + ids
    # Second turn ends on the tokenizer EOS: SGLang names the EOS id where vLLM says null.
    nxt = MSGS + [assistant, {"role": "tool", "tool_call_id": call["id"], "content": "a.py"}]
    second = chat(sg, model="think", messages=nxt, tools=[BASH_TOOL], return_meta_info=True)["choices"][0]
    assert second["message"] == {"role": "assistant", "content": "Done.", "reasoning_content": None,
                                 "tool_calls": None}
    assert second["finish_reason"] == "stop" and second["matched_stop"] == engine.eos_token_id
    assert second["meta_info"]["finish_reason"] == {"type": "stop", "matched": engine.eos_token_id}


def test_tokenize_detokenize_and_models(sg, engine, ref_tokenizer):
    data = post(sg, "/tokenize", prompt="héllo <|im_end|>", return_token_strs=True)
    ids = ref_tokenizer("héllo <|im_end|>").input_ids
    assert data == {"tokens": ids, "count": len(ids), "max_model_len": engine.max_model_len}
    chat_ids = post(sg, "/tokenize", messages=MSGS)["tokens"]
    assert chat_ids == engine.tokenize_chat(MSGS)
    assert post(sg, "/detokenize", tokens=ids) == {"text": "héllo "}
    assert post(sg, "/detokenize", tokens=ids, skip_special_tokens=False) == {"text": "héllo <|im_end|>"}
    models = sg.get("/v1/models").get_json()["data"]
    assert [m["id"] for m in models] == ["tiny", "think"]
    assert all(m["owned_by"] == "sglang" and "permission" not in m for m in models)


def test_unknown_dialect(engine):
    with pytest.raises(ValueError, match="unknown dialect"):
        create_app(engine, dialect="tgi")


def test_wsgi_reads_dialect_from_env(model_dir, monkeypatch):
    monkeypatch.setenv("POLAR_REFSERVER_MODEL_DIR", str(model_dir))
    monkeypatch.setenv("POLAR_REFSERVER_DIALECT", "sglang")
    monkeypatch.setenv("POLAR_REFSERVER_POLICIES", "{}")
    monkeypatch.delitem(sys.modules, "infra.refserver.wsgi", raising=False)
    import infra.refserver.wsgi as wsgi

    try:
        data = post(wsgi.app.test_client(), "/detokenize", tokens=[1, 2])
        assert set(data) == {"text"}
    finally:
        sys.modules.pop("infra.refserver.wsgi", None)


_json = st.recursive(st.none() | st.booleans() | st.integers(-3, 40) | st.text(max_size=5),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                     max_leaves=6)
_FIELDS = ["return_meta_info", "return_prompt_token_ids", "return_token_ids", "logprobs", "top_logprobs",
           "tools", "tool_choice", "skip_special_tokens", "stop", "max_tokens", "messages", "tokens"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["/v1/chat/completions", "/tokenize", "/detokenize"]),
       junk=st.dictionaries(st.sampled_from(_FIELDS), _json, max_size=4))
def test_never_500_on_junk(sg, path, junk):
    base = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "tokens": [1, 2]}
    r = sg.post(path, data=json.dumps({**base, **junk}), content_type="application/json")
    assert r.status_code < 500, r.get_data(as_text=True)
