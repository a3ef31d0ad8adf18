"""Context limits against real processes: the reference server started with a 256-token context
(``polar model serve --max-model-len 256``) behind the proxy under gunicorn/gevent, called by
the official SDKs. Agent CLIs ask for 32000 output tokens: such calls still complete (clamped),
a prompt longer than the context gets each vendor's own overflow error, and with
``context_overflow=refuse`` so does an output limit that does not fit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import redis

from infra.embedded_redis import _die_with_parent, free_port
from infra.stack import Stack, StackConfig
from pipeline import keys
from pipeline.codec import unpack
from pipeline.settings import Settings
from tests.proxy.overflow_calls import (
    KINDS,
    LONG_TEXT,
    PROVIDER_OF,
    VENDOR_MODEL,
    ask,
    overflow_seen,
    real_clients,
    shown_message,
)
from tests.support import running_session, sid_of, wait_for

CONTEXT = 256
THINK = Path(__file__).resolve().parents[1] / "fixtures" / "sdk_think_policy.json"


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def small_engine(model_dir, tmp_path_factory):
    """The reference server with a 256-token context, serving the scripted ``sdk-think`` policy."""
    port, log = free_port(), tmp_path_factory.mktemp("small-engine") / "model.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "infra.cli.main", "model", "serve", "--port", str(port),
                                 "--model-dir", str(model_dir), "--max-model-len", str(CONTEXT),
                                 "--policy", f"sdk-think={THINK}"],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: proc.poll() is not None or _healthy(url), timeout=120)
        assert proc.poll() is None, log.read_text()
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _proxy(small_engine, tmp_path_factory, name: str, **settings):
    # The harnesses name vendor models; the proxy serves the scripted policy whatever they ask for.
    s = Settings(home=tmp_path_factory.mktemp(name), upstream_url=small_engine, upstream_model="sdk-think",
                 **settings)
    return Stack(StackConfig(settings=s, upstream="external", components=("proxy",)))


@pytest.fixture(scope="module")
def clamp_stack(small_engine, tmp_path_factory):
    with _proxy(small_engine, tmp_path_factory, "clamp") as stack:
        yield stack


@pytest.fixture(scope="module")
def late_stack(small_engine, tmp_path_factory):
    """Streams opened 1 ms after their call is admitted: with the call parked by a weight-sync
    pause until the stream has begun, the refusal comes as an event of a begun stream."""
    with _proxy(small_engine, tmp_path_factory, "late", stream_keepalive_seconds=0.001) as stack:
        yield stack


@pytest.fixture(scope="module")
def refuse_stack(small_engine, tmp_path_factory):
    with _proxy(small_engine, tmp_path_factory, "refuse", context_overflow="refuse") as stack:
        yield stack


def raw_records(stack, key):
    client = redis.Redis.from_url(stack.settings.redis_url)
    return [unpack(b) for b in client.lrange(keys.session_completions(sid_of(key)), 0, -1)]


def error_records(stack, key):
    client = redis.Redis.from_url(stack.settings.redis_url)
    return [unpack(b) for b in client.lrange(keys.session_errors(sid_of(key)), 0, -1)]


@pytest.mark.parametrize("kind", KINDS)
def test_32000_output_tokens_against_a_256_token_context_still_complete(clamp_stack, kind):
    key = running_session(clamp_stack.settings.redis_url)
    c = real_clients(clamp_stack.settings.proxy_url, key)
    answers = [ask(kind, c, VENDOR_MODEL[kind], 32000, stream=stream) for stream in (False, True, False)]
    assert answers == ["42"] * 3
    recs = raw_records(clamp_stack, key)
    assert len(recs) == 3 and [r["stream"] for r in recs] == [False, True, False]
    for rec in recs:
        assert rec["provider"] == PROVIDER_OF[kind] and rec["finish_reason"] == "stop"
        assert (rec["model"], rec["upstream_model"]) == (VENDOR_MODEL[kind], "sdk-think")  # Gemini's from its URL
        assert rec["requested_max_tokens"] == 32000
        assert rec["sent_max_tokens"] == CONTEXT - len(rec["prompt_ids"])
        assert rec["normalized_request"]["max_tokens"] == rec["sent_max_tokens"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_prompt_longer_than_the_context_gets_the_vendors_overflow_error(clamp_stack, kind, stream):
    key = running_session(clamp_stack.settings.redis_url)
    c = real_clients(clamp_stack.settings.proxy_url, key)
    with pytest.raises(Exception) as info:
        ask(kind, c, VENDOR_MODEL[kind], 32000, text=LONG_TEXT, stream=stream)
    overflow_seen(kind, info.value, prompt_fits=False)
    assert raw_records(clamp_stack, key) == []
    # Recorded as the agent was told it (the result's last_proxy_error, the viewer): it was
    # OpenAI Chat's wording whatever the API, e.g. "This model's maximum context length is ..."
    # for a Claude Code session whose transcript says "prompt is too long: ...".
    errors = [(e["status_code"], e["error_type"], e["message"]) for e in error_records(clamp_stack, key)]
    assert errors == [(400, "ContextOverflow", shown_message(kind, info.value))]
    assert ask(kind, c, VENDOR_MODEL[kind], 32000) == "42"  # compacted history goes through again


def _until_error(events) -> tuple[list, BaseException | None]:
    got: list = []
    try:
        for event in events:
            got.append(event)
    except Exception as exc:  # noqa: BLE001 - the SDK's own error is what is checked
        return got, exc
    return got, None


def _after_a_parked_start(stack, key: str, call) -> tuple[list, BaseException | None]:
    """``call``'s events up to its error, the call parked by a weight-sync pause until its stream
    has begun (an engine that refuses within the keepalive interval would be a plain 400)."""
    import threading

    admin = httpx.Client(headers={"x-polar-admin-token": stack.settings.secret("admin_token") or ""}, timeout=30)
    in_flight = redis.Redis.from_url(stack.settings.redis_url)
    assert admin.post(f"{stack.settings.proxy_url}/admin/pause", json={"holder": key, "timeout_seconds": 30}).json()["paused"]
    out: list = []
    try:
        caller = threading.Thread(target=lambda: out.append(_until_error(call())), daemon=True)
        caller.start()
        # Admitted and parked; its stream opens 1 ms later (the keepalive interval), well before
        # this test's resume reaches the proxy.
        wait_for(lambda: in_flight.zcard(keys.session_calls(sid_of(key))) == 1, timeout=30, interval=0.02)
    finally:
        admin.post(f"{stack.settings.proxy_url}/admin/resume", json={"holder": key})
    caller.join(timeout=60)
    return out[0]


@pytest.mark.parametrize("kind", KINDS)
def test_an_overflow_after_the_stream_began_is_the_sdks_error_and_no_completion(late_stack, kind):
    """The head (and keepalives) went out before the engine refused: the refusal is the stream's
    error event, which each official SDK raises as its own error (the Responses SDK yields its
    ``error`` and ``response.failed`` events), in the vendor's overflow wording."""
    import anthropic
    import openai
    from google.genai import errors as genai_errors

    key = running_session(late_stack.settings.redis_url)
    c, model, user = real_clients(late_stack.settings.proxy_url, key), VENDOR_MODEL[kind], [
        {"role": "user", "content": LONG_TEXT}]
    calls = {"chat": lambda: c["openai"].chat.completions.create(model=model, messages=user, stream=True),
             "responses": lambda: c["openai"].responses.create(model=model, input=LONG_TEXT, stream=True),
             "anthropic": lambda: c["anthropic"].messages.create(model=model, max_tokens=32000, messages=user,
                                                                 stream=True),
             "google": lambda: c["google"].models.generate_content_stream(model=model, contents=LONG_TEXT)}
    got, err = _after_a_parked_start(late_stack, key, calls[kind])
    if kind == "chat":
        assert [ch.choices[0].delta.role for ch in got] == ["assistant"]  # the head, then the error
        assert isinstance(err, openai.APIError) and err.code == "context_length_exceeded", repr(err)
        assert err.type == "invalid_request_error"
        shown = err.message
    elif kind == "responses":
        assert err is None and [e.type for e in got] == ["response.created", "response.in_progress", "error",
                                                          "response.failed"]
        assert got[2].code == got[3].response.error.code == "context_length_exceeded"
        assert got[3].response.status == "failed" and got[3].response.error.message == got[2].message
        shown = got[2].message
    elif kind == "anthropic":
        assert [e.type for e in got] == ["message_start"]
        assert isinstance(err, anthropic.APIStatusError), repr(err)
        assert err.body["type"] == "error" and err.body["error"]["type"] == "invalid_request_error"
        shown = err.body["error"]["message"]
        assert shown.startswith("prompt is too long: "), shown
    else:
        assert got == [] and isinstance(err, genai_errors.ClientError), repr(err)
        shown = overflow_seen(kind, err, prompt_fits=False)
    assert raw_records(late_stack, key) == []
    errors = [(e["status_code"], e["error_type"], e["message"]) for e in error_records(late_stack, key)]
    assert errors == [(400, "ContextOverflow", shown)]
    assert ask(kind, c, model, 32000, stream=True) == "42"  # a begun stream that is answered: as usual
    assert len(raw_records(late_stack, key)) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_refuse_answers_an_output_limit_that_does_not_fit_with_the_overflow_error(refuse_stack, kind):
    key = running_session(refuse_stack.settings.redis_url)
    c = real_clients(refuse_stack.settings.proxy_url, key)
    for stream in (False, True):
        with pytest.raises(Exception) as info:
            ask(kind, c, VENDOR_MODEL[kind], 32000, stream=stream)
        assert "32000" in overflow_seen(kind, info.value, prompt_fits=True)
    assert ask(kind, c, VENDOR_MODEL[kind], 128) == "42"  # a limit that fits is sent as asked
    [rec] = raw_records(refuse_stack, key)
    assert rec["requested_max_tokens"] == rec["sent_max_tokens"] == 128


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_responses_truncation_auto_drops_the_oldest_messages_until_the_input_fits(clamp_stack, stream):
    """``truncation: "auto"`` was echoed and did nothing: an input over the context got the
    overflow error a client that asked for truncation does not expect. Now its oldest messages
    go (the system prompt and the newest message stay), and the record says how many."""
    import openai

    key = running_session(clamp_stack.settings.redis_url)
    sdk = real_clients(clamp_stack.settings.proxy_url, key)["openai"]
    # (user notes only: the scripted policy plays the turn its count of assistant messages names)
    history = [{"role": "user", "content": f"note {i}: " + "lorem ipsum " * 15} for i in range(6)]
    items = [*history, {"role": "user", "content": "6*7?"}]
    call = {"model": VENDOR_MODEL["responses"], "instructions": "Answer briefly.", "input": items,
            "max_output_tokens": 32}

    def create(**extra):
        if stream:
            with sdk.responses.stream(**{**call, **extra}) as s:
                return s.get_final_response()
        return sdk.responses.create(**{**call, **extra})

    with pytest.raises(openai.BadRequestError) as info:  # without it (the default "disabled"): the overflow
        create()
    overflow_seen("responses", info.value, prompt_fits=False)
    response = create(truncation="auto")
    assert response.output_text == "42" and response.truncation == "auto"
    [rec] = raw_records(clamp_stack, key)
    sent = rec["normalized_request"]["messages"]
    dropped = len(items) + 1 - len(sent)
    assert sent[0] == {"role": "system", "content": "Answer briefly."} and sent[-1]["content"] == "6*7?"
    assert 0 < dropped < len(history)
    assert [m["content"] for m in sent[1:]] == [m["content"] for m in items[dropped:]]
    assert rec["normalizations"] == [f"truncation:auto dropped the {dropped} oldest messages"]
    assert len(rec["prompt_ids"]) + 32 < CONTEXT  # room left for the output asked for
    with pytest.raises(openai.BadRequestError) as info:  # the newest message alone over the context
        create(truncation="auto", input=[*history, {"role": "user", "content": LONG_TEXT}])
    overflow_seen("responses", info.value, prompt_fits=False)
