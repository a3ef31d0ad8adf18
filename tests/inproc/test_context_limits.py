"""Context limits, in-process: the proxy app in front of the reference server (a real tiny model
with a 256-token context) over WSGI, called by the vendors' SDKs. What is checked here that the
real-process tests cannot see cheaply: exactly which engine round trips each call cost."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import redis

from infra.refserver import ModelEngine, ScriptedPolicy, create_app
from pipeline import keys
from pipeline.codec import unpack
from proxy.app import create_app as create_proxy
from proxy.upstream import WSGITransport
from tests.inproc.conftest import proxy_settings, sdk_clients
from tests.proxy.overflow_calls import KINDS, LONG_TEXT, PROVIDER_OF, VENDOR_MODEL, ask, overflow_seen
from tests.support import records, running_session, sid_of

CONTEXT = 256
THINK = Path(__file__).resolve().parents[1] / "fixtures" / "sdk_think_policy.json"
CHAT, MODELS, TOKENIZE = ("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("POST", "/tokenize")


@pytest.fixture(scope="module")
def engine(model_dir):
    return ModelEngine.load(model_dir, max_model_len=CONTEXT)


def newer_vllm_wording(app):
    """The reference server with vLLM's 2026 renderer wording: an output limit over the context
    is refused before the prompt is read, and the prompt is only counted up to one token past
    what could fit ("at least N input tokens"), so the proxy must ask /tokenize."""
    old = re.compile(r"maximum context length is (\d+) tokens\. However, (?:you requested \d+ tokens "
                     r"\((\d+) in the messages, (\d+) in the completion\)|your request has (\d+) input tokens)")

    def wrapped(environ, start_response):
        seen = []
        body = b"".join(app(environ, lambda status, headers, exc=None: seen.append((status, headers))))
        status, headers = seen[0]
        m = old.search(body.decode()) if status.startswith("400") else None
        if m:
            context = int(m[1])
            prompt, output = (int(m[2]), int(m[3])) if m[2] else (int(m[4]), 0)
            if output > context:
                message = (f"max_tokens={output} cannot be greater than max_model_len=max_total_tokens={context}. "
                           "Please request fewer output tokens.")
            else:
                least = min(prompt, context - output + 1)
                message = (f"This model's maximum context length is {context} tokens. However, you requested {output} "
                           f"output tokens and your prompt contains at least {least} input tokens, for a total of at "
                           f"least {least + output} tokens. Please reduce the length of the input prompt or the "
                           "number of requested output tokens.")
            body = json.dumps({"error": {"message": message, "type": "BadRequestError", "param": None,
                                         "code": 400}}).encode()
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers.append(("Content-Length", str(len(body))))
        start_response(status, headers)
        return [body]

    return wrapped


def stack(engine, redis_url, tmp_path, *, dialect="vllm", wording=None, **settings):
    """(proxy app, transport to the engine): the transport lists every engine round trip."""
    server = create_app(engine, policies={"sdk-think": ScriptedPolicy.load(THINK, name="sdk-think")}, dialect=dialect)
    transport = WSGITransport(wording(server) if wording else server)
    settings.setdefault("upstream_engine", dialect)
    return create_proxy(proxy_settings(redis_url, tmp_path, **settings), transport=transport), transport


def raw_records(redis_url, key):
    """Completion records as stored (every field, also those the schema does not name)."""
    client = redis.Redis.from_url(redis_url)
    return [unpack(b) for b in client.lrange(keys.session_completions(sid_of(key)), 0, -1)]


def trips(transport):
    return [(method, path) for _, method, path in transport.calls]


@pytest.mark.parametrize("kind", KINDS)
def test_a_32000_token_limit_is_clamped_to_the_room_the_prompt_leaves(engine, r, redis_url, tmp_path, kind):
    app, transport = stack(engine, redis_url, tmp_path)
    key = running_session(redis_url)
    assert ask(kind, sdk_clients(app, key), "sdk-think", 32000) == "42"
    # The engine refused (its wording states the prompt's size), its cards were read once, retried.
    assert trips(transport) == [CHAT, MODELS, CHAT]
    transport.calls.clear()
    assert ask(kind, sdk_clients(app, key), "sdk-think", 32000, stream=True) == "42"
    # The context is known now: a limit no prompt could fit is fitted first (count, then sample).
    assert trips(transport) == [TOKENIZE, CHAT]
    for rec in raw_records(redis_url, key):
        assert rec["provider"] == PROVIDER_OF[kind]
        assert rec["requested_max_tokens"] == 32000
        assert rec["sent_max_tokens"] == CONTEXT - len(rec["prompt_ids"])  # the whole room, not one less
        assert rec["normalized_request"]["max_tokens"] == rec["sent_max_tokens"]
        assert rec["finish_reason"] == "stop"


@pytest.mark.parametrize("kind", KINDS)
def test_a_call_that_fits_costs_one_round_trip(engine, r, redis_url, tmp_path, kind):
    app, transport = stack(engine, redis_url, tmp_path)
    key = running_session(redis_url)
    assert ask(kind, sdk_clients(app, key), "sdk-think", 100) == "42"
    assert trips(transport) == [CHAT]
    [rec] = raw_records(redis_url, key)
    assert rec["requested_max_tokens"] == rec["sent_max_tokens"] == 100


def test_newer_vllm_wording_is_fitted_through_tokenize(engine, r, redis_url, tmp_path):
    app, transport = stack(engine, redis_url, tmp_path, wording=newer_vllm_wording)
    key = running_session(redis_url)
    for max_tokens in (32000, 250):  # over the whole context; over the room left
        transport.calls.clear()
        assert ask("anthropic", sdk_clients(app, key), "sdk-think", max_tokens) == "42"
        assert trips(transport)[-2:] == [TOKENIZE, CHAT] and trips(transport)[0] == CHAT
    recs = raw_records(redis_url, key)
    assert [rec["sent_max_tokens"] for rec in recs] == [CONTEXT - len(recs[0]["prompt_ids"])] * 2
    with pytest.raises(Exception) as info:  # a prompt over the context: counted, then refused in the API's words
        ask("anthropic", sdk_clients(app, key), "sdk-think", 10, text=LONG_TEXT)
    count = engine.tokenize_chat([{"role": "user", "content": LONG_TEXT}])
    assert overflow_seen("anthropic", info.value, prompt_fits=False) == \
        f"prompt is too long: {len(count)} tokens > {CONTEXT - 1} maximum"


@pytest.mark.parametrize("max_tokens", [32000, 250])
def test_sglang_keeps_one_token_of_the_context_free(engine, r, redis_url, tmp_path, max_tokens):
    """In SGLang's own words: an output limit over the whole context is refused before the prompt
    is read (the proxy counts it), one over the room left names the prompt's size."""
    app, transport = stack(engine, redis_url, tmp_path, dialect="sglang")
    key = running_session(redis_url)
    assert ask("chat", sdk_clients(app, key), "sdk-think", max_tokens) == "42"
    assert trips(transport) == ([CHAT, MODELS, TOKENIZE, CHAT] if max_tokens > CONTEXT else [CHAT, MODELS, CHAT])
    [rec] = raw_records(redis_url, key)
    assert rec["sent_max_tokens"] == CONTEXT - len(rec["prompt_ids"]) - 1  # SGLang refuses prompt + max == context


def test_the_configured_context_length_is_used_without_asking_the_engine(engine, r, redis_url, tmp_path):
    app, transport = stack(engine, redis_url, tmp_path, upstream_context_length=200)
    key = running_session(redis_url)
    assert ask("google", sdk_clients(app, key), "sdk-think", 32000) == "42"
    assert trips(transport) == [TOKENIZE, CHAT]  # never refused, no model cards read
    [rec] = raw_records(redis_url, key)
    assert rec["sent_max_tokens"] == 200 - len(rec["prompt_ids"])


@pytest.mark.parametrize("kind", KINDS)
def test_a_prompt_over_the_context_gets_the_vendors_overflow_error(engine, r, redis_url, tmp_path, kind):
    app, transport = stack(engine, redis_url, tmp_path)
    key = running_session(redis_url)
    prompt = len(engine.tokenize_chat([{"role": "user", "content": LONG_TEXT}]))
    for stream in (False, True):
        with pytest.raises(Exception) as info:
            ask(kind, sdk_clients(app, key), "sdk-think", 1000, text=LONG_TEXT, stream=stream)
        message = overflow_seen(kind, info.value, prompt_fits=False)
        if kind in ("anthropic", "google"):
            assert str(prompt) in message and str(CONTEXT - 1) in message
    # Refused by the engine (which states the prompt's size), cards read; then known: counted. Never sampled.
    assert trips(transport) == [CHAT, MODELS, TOKENIZE]
    done, errors = records(redis_url, key)
    assert done == [] and [e["error_type"] for e in errors] == ["ContextOverflow"] * 2


@pytest.mark.parametrize("kind", KINDS)
def test_refuse_answers_the_overflow_error_instead_of_clamping(engine, r, redis_url, tmp_path, kind):
    app, _ = stack(engine, redis_url, tmp_path, context_overflow="refuse")
    key = running_session(redis_url)
    with pytest.raises(Exception) as info:
        ask(kind, sdk_clients(app, key), "sdk-think", 32000)
    message = overflow_seen(kind, info.value, prompt_fits=True)
    assert "32000" in message
    assert ask(kind, sdk_clients(app, key), "sdk-think", 100) == "42"  # what fits is untouched


@pytest.mark.parametrize("kind", KINDS)
def test_records_keep_the_requested_and_the_served_model(engine, r, redis_url, tmp_path, kind):
    app, _ = stack(engine, redis_url, tmp_path, upstream_model="sdk-think")
    key = running_session(redis_url)
    assert ask(kind, sdk_clients(app, key), VENDOR_MODEL[kind], 64) == "42"
    [rec] = raw_records(redis_url, key)
    assert (rec["model"], rec["upstream_model"]) == (VENDOR_MODEL[kind], "sdk-think")


# --- token-in (agent.token_in): a call continuing a recorded turn is sent as ids -------------------

BASH = {"type": "function", "function": {"name": "bash", "description": "Run a shell command.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
STEP = {"turns": [{"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}, {"content": "Done."}]}


def token_in_stack(engine, redis_url, tmp_path, dialect):
    server = create_app(engine, policies={"step": ScriptedPolicy.from_obj(STEP, name="step")}, dialect=dialect)
    return create_proxy(proxy_settings(redis_url, tmp_path, upstream_engine=dialect), transport=WSGITransport(server))


def continue_after_tool(app, key, tool_output: str, max_tokens: int):
    """Two Chat calls: the first fits (the engine's context stays unknown to the proxy), the
    second continues its recorded turn (spliced, sent as ids) with ``max_tokens``."""
    sdk = sdk_clients(app, key)["openai"]
    messages: list = [{"role": "user", "content": "List the files."}]
    first = sdk.chat.completions.create(model="step", messages=messages, tools=[BASH], max_tokens=32)
    [call] = first.choices[0].message.tool_calls
    messages += [{"role": "assistant", "content": None, "tool_calls": [
                     {"id": call.id, "type": "function",
                      "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
                 {"role": "tool", "tool_call_id": call.id, "content": tool_output}]
    return sdk.chat.completions.create(model="step", messages=messages, tools=[BASH], max_tokens=max_tokens)


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_a_spliced_call_over_the_room_left_is_clamped_like_a_rendered_one(engine, r, redis_url, tmp_path, dialect):
    """Token-in sessions get the same fitting as rendered calls: a spliced call whose prompt fits
    but whose output limit does not, sent before the proxy knows the context, is refused by the
    engine, then sent again with the room its (exactly counted) ids leave -- not the engine's
    400 passed on to the agent (which a harness takes for a context overflow and compacts on)."""
    app = token_in_stack(engine, redis_url, tmp_path, dialect)
    key = running_session(redis_url, agent={"custom_shell": "true", "token_in": "auto"})
    answer = continue_after_tool(app, key, "a.py b.py", max_tokens=CONTEXT)
    if dialect == "vllm":  # (SGLang's /generate names no model: the tiny model answers, not the script)
        assert answer.choices[0].message.content == "Done."
    done, errors = records(redis_url, key)
    assert errors == []
    second = raw_records(redis_url, key)[1]
    assert second["token_in"]["spliced"], second["token_in"]
    assert second["requested_max_tokens"] == CONTEXT
    reserve = 1 if dialect == "sglang" else 0  # SGLang keeps one token of the context free
    assert second["sent_max_tokens"] == CONTEXT - reserve - len(second["prompt_ids"])


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_a_spliced_prompt_over_the_context_gets_the_vendors_overflow_error(engine, r, redis_url, tmp_path, dialect):
    app = token_in_stack(engine, redis_url, tmp_path, dialect)
    key = running_session(redis_url, agent={"custom_shell": "true", "token_in": "auto"})
    with pytest.raises(Exception) as info:
        continue_after_tool(app, key, LONG_TEXT, max_tokens=16)
    overflow_seen("chat", info.value, prompt_fits=False)
    done, errors = records(redis_url, key)
    assert len(done) == 1 and [e["error_type"] for e in errors] == ["ContextOverflow"]
