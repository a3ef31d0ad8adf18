import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.refserver import ModelEngine, create_app

MSG = [{"role": "user", "content": "hi"}]


def check_error(r, status):
    assert r.status_code == status, r.get_data(as_text=True)
    err = r.get_json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == status and err["param"] is None and isinstance(err["message"], str) and err["message"]
    return err


def post(client, path, body):
    return client.post(path, data=json.dumps(body), content_type="application/json")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"])
@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"", b"\xff\xfe"])
def test_malformed_json(client, path, raw):
    err = check_error(client.post(path, data=raw, content_type="application/json"), 400)
    assert err["type"] == "BadRequestError"


@pytest.mark.parametrize("body, needle", [
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"content": "no role"}]}, "messages[0]"),
    ({"messages": MSG, "n": 2}, "'n'"),
    ({"messages": MSG, "top_logprobs": 2}, "logprobs"),
    ({"messages": MSG, "logprobs": True, "top_logprobs": 50}, "top_logprobs"),
    ({"messages": MSG, "tools": []}, "tools"),
    ({"messages": MSG, "tool_choice": "auto"}, "tools"),
    ({"messages": MSG, "tools": [{"type": "function"}]}, "tools[0]"),
    ({"messages": MSG, "temperature": -1}, "temperature"),
    ({"messages": MSG, "temperature": "hot"}, "temperature"),
    ({"messages": MSG, "top_p": 0}, "top_p"),
    ({"messages": MSG, "max_tokens": 0}, "max_tokens"),
    # what the server does not apply is still refused out of vLLM's ranges, in its words
    ({"messages": MSG, "presence_penalty": 2.5}, "presence_penalty must be in [-2, 2]"),
    ({"messages": MSG, "frequency_penalty": -3}, "frequency_penalty must be in [-2, 2]"),
    ({"messages": MSG, "repetition_penalty": 0}, "repetition_penalty must be greater than zero"),
    ({"messages": MSG, "min_p": 1.5}, "min_p must be in [0, 1]"),
    ({"messages": MSG, "min_tokens": -1}, "min_tokens must be greater than or equal to 0"),
    ({"messages": MSG, "min_tokens": 5, "max_tokens": 2}, "min_tokens must be less than or equal to max_tokens=2"),
    ({"messages": MSG, "max_tokens": "3"}, "max_tokens"),
    ({"messages": MSG, "logprobs": "yes"}, "logprobs"),
    ({"messages": MSG, "stop": 5}, "stop"),
    ({"messages": MSG, "stop_token_ids": [10**9]}, "stop_token_ids"),
    ({"messages": MSG, "seed": 1.5}, "seed"),
    ({"messages": MSG, "stream": True}, "stream"),
    ({"messages": MSG, "continue_final_message": True}, "continue_final_message"),
    ({"messages": MSG, "chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
    ({"messages": MSG, "max_tokens": 40000}, "maximum context length"),
    ({"messages": [{"role": "user", "content": {"weird": 1}}], "tool_choice": {"function": {"name": "x"}}}, "Tool"),
])
def test_chat_validation(client, body, needle):
    err = check_error(post(client, "/v1/chat/completions", body), 400)
    assert needle in err["message"]


def test_unknown_model(client):
    for path, body in [("/v1/chat/completions", {"messages": MSG}), ("/v1/completions", {"prompt": "x"}),
                       ("/tokenize", {"prompt": "x"})]:
        err = check_error(post(client, path, {**body, "model": "gpt-nope"}), 404)
        assert err["type"] == "NotFoundError" and "gpt-nope" in err["message"]


@pytest.mark.parametrize("body, needle", [
    ({"prompt": ["a", "b"]}, "one prompt"),
    ({"prompt": [[1, 2], [3]]}, "one prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, 10**9]}, "out of vocabulary"),
    ({"prompt": [1, -2]}, "out of vocabulary"),
    ({}, "prompt"),
    ({"prompt": "x", "max_tokens": -1}, "max_tokens"),
    ({"prompt": "x", "logprobs": True}, "logprobs"),
    ({"prompt": "x", "prompt_logprobs": -1}, "prompt_logprobs"),
    ({"prompt": "x", "max_tokens": 40000}, "maximum context length"),
    ({"prompt": "x", "presence_penalty": -2.5}, "presence_penalty must be in [-2, 2]"),
])
def test_completion_validation(client, body, needle):
    assert needle in check_error(post(client, "/v1/completions", body), 400)["message"]


def test_tokenize_detokenize_validation(client):
    check_error(post(client, "/tokenize", {"text": "x"}), 400)
    check_error(post(client, "/detokenize", {"tokens": ["a"]}), 400)
    check_error(post(client, "/detokenize", {"tokens": [10**9]}), 400)


def test_prompt_longer_than_context(engine):
    small = ModelEngine(engine.tokenizer, engine.model, max_model_len=16)
    client = create_app(small).test_client()
    long_msg = [{"role": "user", "content": "word " * 40}]
    err = check_error(post(client, "/v1/chat/completions", {"messages": long_msg}), 400)
    assert "maximum context length is 16 tokens" in err["message"]
    err = check_error(post(client, "/v1/chat/completions", {"messages": MSG, "max_tokens": 15}), 400)
    assert "However, you requested" in err["message"]


def test_unknown_route_and_method(client):
    check_error(client.get("/v1/nothing"), 404)
    check_error(client.get("/v1/chat/completions"), 405)


def test_template_render_failure_is_400(client):
    msgs = MSG + [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": 5, "arguments": {}}}]}]
    err = check_error(post(client, "/v1/chat/completions", {"messages": msgs}), 400)
    assert "chat template" in err["message"]


_json = st.recursive(st.none() | st.booleans() | st.integers(-3, 40) | st.floats(allow_nan=True) | st.text(max_size=5),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                     max_leaves=6)
_FIELDS = ["model", "messages", "tools", "tool_choice", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop",
           "stop_token_ids", "n", "logprobs", "top_logprobs", "prompt_logprobs", "return_token_ids", "echo",
           "add_generation_prompt", "continue_final_message", "chat_template_kwargs", "prompt", "tokens"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"]),
       junk=st.dictionaries(st.sampled_from(_FIELDS), _json, max_size=4),
       base=st.sampled_from([{}, {"messages": MSG, "max_tokens": 2}, {"prompt": "x", "max_tokens": 2}]))
def test_never_500_on_junk(client, path, junk, base):
    r = post(client, path, {**base, **junk})
    assert r.status_code < 500, r.get_data(as_text=True)
    if r.status_code != 200:
        check_error(r, r.status_code)


_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool", "developer", ""])},
    optional={"content": _json, "reasoning_content": _json, "reasoning": _json,
              "tool_calls": _json | st.lists(st.dictionaries(
                  st.sampled_from(["function", "name", "arguments", "type"]), _json, max_size=3), max_size=2)})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(_message, min_size=1, max_size=4), tools=st.none() | st.just([{
    "type": "function", "function": {"name": "bash"}}]), path=st.sampled_from(["/v1/chat/completions", "/tokenize"]))
def test_never_500_on_junk_messages(client, messages, tools, path):
    body = {"messages": messages, "max_tokens": 2, **({"tools": tools} if tools else {})}
    r = post(client, path, body)
    assert r.status_code < 500, r.get_data(as_text=True)


def test_a_body_over_the_limit_is_413_in_the_engines_format(client):
    """The reference server read any body whole: a client on the engine's port could grow it at will."""
    from infra.refserver.app import MAX_REQUEST_BYTES

    r = client.post("/v1/chat/completions", data=b" " * (MAX_REQUEST_BYTES + 1), content_type="application/json")
    err = check_error(r, 413)
    assert err["type"] == "RequestEntityTooLargeError"
