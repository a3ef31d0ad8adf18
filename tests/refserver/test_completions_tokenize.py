import json

import pytest

TOL = 1e-4


def post(client, path, status=200, **body):
    r = client.post(path, data=json.dumps(body), content_type="application/json")
    assert r.status_code == status, r.get_json()
    return r.get_json()


@pytest.fixture(scope="module")
def prompt_ids(engine):
    return engine.tokenize_text("def add(a, b):\n    return a + b\n", add_special_tokens=False)


@pytest.mark.parametrize("max_tokens", [0, 1])
def test_token_id_prompt_with_prompt_logprobs(client, teacher_forced, prompt_ids, max_tokens):
    data = post(client, "/v1/completions", model="tiny", prompt=prompt_ids, max_tokens=max_tokens,
                prompt_logprobs=3, return_token_ids=True, seed=0)
    assert data["object"] == "text_completion" and data["id"].startswith("cmpl-")
    choice = data["choices"][0]
    assert choice["prompt_token_ids"] == prompt_ids
    assert len(choice["token_ids"]) == max_tokens == data["usage"]["completion_tokens"]
    assert data["usage"]["prompt_tokens"] == len(prompt_ids)
    if max_tokens == 0:
        assert choice["text"] == "" and choice["finish_reason"] == "length"
    plp = choice["prompt_logprobs"]
    assert len(plp) == len(prompt_ids) and plp[0] is None
    lp = teacher_forced(prompt_ids)
    for i in range(1, len(prompt_ids)):
        tid = prompt_ids[i]
        entry = plp[i][str(tid)]
        assert abs(entry["logprob"] - lp[i - 1, tid].item()) <= TOL
        assert entry["rank"] >= 1 and isinstance(entry["decoded_token"], str)
        assert sum(1 for v in plp[i].values() if v["rank"] <= 3) >= 3


def test_completion_logprobs_and_echo(client, teacher_forced, prompt_ids, engine):
    data = post(client, "/v1/completions", prompt=prompt_ids, max_tokens=5, logprobs=2, echo=True, seed=4,
                return_token_ids=True, ignore_eos=True)
    choice = data["choices"][0]
    out = choice["token_ids"]
    lps = choice["logprobs"]
    n = len(prompt_ids) + len(out)
    assert len(lps["tokens"]) == len(lps["token_logprobs"]) == len(lps["top_logprobs"]) == len(lps["text_offset"]) == n
    assert lps["token_logprobs"][0] is None and lps["top_logprobs"][0] is None
    lp = teacher_forced(prompt_ids + out)
    for i, tid in enumerate((prompt_ids + out)[1:], start=1):
        assert abs(lps["token_logprobs"][i] - lp[i - 1, tid].item()) <= TOL
        assert 1 <= len(lps["top_logprobs"][i]) <= 3
    assert choice["text"] == engine.decode(prompt_ids, skip_special_tokens=False) + engine.decode(out)
    assert lps["text_offset"][0] == 0
    assert all(b - a == len(t) for a, b, t in zip(lps["text_offset"], lps["text_offset"][1:], lps["tokens"]))


def test_completion_string_prompt_and_token_id_strings(client, engine):
    data = post(client, "/v1/completions", model="script3", prompt="hello world", max_tokens=3, logprobs=0,
                return_tokens_as_token_ids=True, return_token_ids=True, ignore_eos=True, seed=1)
    choice = data["choices"][0]
    assert data["model"] == "script3"
    assert choice["prompt_token_ids"] == engine.tokenize_text("hello world")
    assert choice["logprobs"]["tokens"] == [f"token_id:{t}" for t in choice["token_ids"]]
    assert choice["prompt_logprobs"] is None


def test_completion_default_max_tokens_is_16(client):
    data = post(client, "/v1/completions", prompt="x = 1", ignore_eos=True, seed=0)
    assert data["usage"]["completion_tokens"] == 16


def test_tokenize_prompt_and_chat_forms(client, engine, ref_tokenizer):
    data = post(client, "/tokenize", model="tiny", prompt="héllo <tool_call>", return_token_strs=True)
    ids = ref_tokenizer("héllo <tool_call>").input_ids
    assert data == {"count": len(ids), "max_model_len": engine.max_model_len, "tokens": ids,
                    "token_strs": ref_tokenizer.convert_ids_to_tokens(ids)}
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hel"}]
    for gen, cont in [(True, False), (False, True), (False, False)]:
        data = post(client, "/tokenize", messages=msgs, add_generation_prompt=gen, continue_final_message=cont)
        text = ref_tokenizer.apply_chat_template(msgs, add_generation_prompt=gen, continue_final_message=cont,
                                                 tokenize=False)
        assert data["tokens"] == ref_tokenizer(text, add_special_tokens=False).input_ids
        assert "token_strs" not in data and data["count"] == len(data["tokens"])


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_reasoning_effort_reaches_the_template_as_each_engine_hands_it_over(engine, ref_tokenizer, dialect):
    """Both chat routes give the template ``reasoning_effort`` and (unless set) ``enable_thinking``;
    SGLang's /tokenize reads the field as its chat route does, vLLM's has no such field."""
    from infra.refserver import create_app

    client = create_app(engine, dialect=dialect).test_client()
    msgs = [{"role": "user", "content": "hi"}]
    off = ref_tokenizer(ref_tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False,
                                                          enable_thinking=False), add_special_tokens=False).input_ids
    plain = ref_tokenizer(ref_tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False),
                          add_special_tokens=False).input_ids
    assert off != plain
    chat = post(client, "/v1/chat/completions", messages=msgs, reasoning_effort="none", max_tokens=1,
                **({"return_token_ids": True} if dialect == "vllm" else {"return_prompt_token_ids": True}))
    ids = chat["prompt_token_ids"] if dialect == "vllm" else chat["choices"][0]["prompt_token_ids"]
    assert ids == off
    told = post(client, "/tokenize", messages=msgs, reasoning_effort="none")["tokens"]
    assert told == (off if dialect == "sglang" else plain)
    as_kwargs = post(client, "/tokenize", messages=msgs,
                     chat_template_kwargs={"reasoning_effort": "none", "enable_thinking": False})["tokens"]
    assert as_kwargs == off
    kept = post(client, "/tokenize", messages=msgs, chat_template_kwargs={"enable_thinking": True},
                reasoning_effort="none")["tokens"]
    assert kept == plain  # a kwarg given wins over the effort (vLLM: the effort is not read at all)


def test_detokenize_round_trip(client):
    ids = post(client, "/tokenize", prompt="<|im_start|>user\nça va?<|im_end|>")["tokens"]
    assert post(client, "/detokenize", tokens=ids) == {"prompt": "<|im_start|>user\nça va?<|im_end|>"}


def test_models_and_health(client, engine):
    r = client.get("/health")
    assert r.status_code == 200
    data = client.get("/v1/models").get_json()
    assert data["object"] == "list"
    assert [m["id"] for m in data["data"]] == ["tiny", "script3"]
    for m in data["data"]:
        assert m["object"] == "model" and m["owned_by"] == "vllm" and m["parent"] is None
        assert m["max_model_len"] == engine.max_model_len and m["permission"] == [] and isinstance(m["created"], int)
        assert m["root"]
