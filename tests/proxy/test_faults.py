"""Every failure reaches the harness in its own provider's error format, and never becomes a
completion record."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
import redis
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as gtypes

from infra.embedded_redis import free_port
from pipeline import keys
from pipeline.codec import unpack
from tests.support import running_session, wait_for

ROOT = Path(__file__).resolve().parents[2]
MSG = [{"role": "user", "content": "hi"}]


def clients(stack, sid):
    base = f"{stack.settings.proxy_url}/s/{sid}"
    return {
        "openai": openai.OpenAI(base_url=f"{base}/v1", api_key=sid, max_retries=0),
        "anthropic": anthropic.Anthropic(base_url=base, api_key=sid, max_retries=0),
        "google": genai.Client(api_key=sid, http_options=gtypes.HttpOptions(
            base_url=base, retry_options=gtypes.HttpRetryOptions(attempts=1))),
    }


def call(kind, c, model, stream=False):
    if kind == "chat":
        if stream:
            return list(c["openai"].chat.completions.create(model=model, messages=MSG, stream=True))
        return c["openai"].chat.completions.create(model=model, messages=MSG)
    if kind == "responses":
        if stream:
            return list(c["openai"].responses.create(model=model, input="hi", stream=True))
        return c["openai"].responses.create(model=model, input="hi")
    if kind == "anthropic":
        if stream:
            with c["anthropic"].messages.stream(model=model, max_tokens=10, messages=MSG) as s:
                return s.get_final_message()
        return c["anthropic"].messages.create(model=model, max_tokens=10, messages=MSG)
    if stream:
        return list(c["google"].models.generate_content_stream(model=model, contents="hi"))
    return c["google"].models.generate_content(model=model, contents="hi")


KINDS = ["chat", "responses", "anthropic", "google"]


def records(stack, sid):
    r = redis.Redis.from_url(stack.settings.redis_url)
    return ([unpack(b) for b in r.lrange(keys.session_completions(sid), 0, -1)],
            [unpack(b) for b in r.lrange(keys.session_errors(sid), 0, -1)])


@pytest.mark.parametrize("kind", KINDS)
def test_success_through_every_provider(fake_stack, kind):
    sid = running_session(fake_stack.settings.redis_url)
    call(kind, clients(fake_stack, sid), "fake")
    call(kind, clients(fake_stack, sid), "fake", stream=True)
    done, errors = records(fake_stack, sid)
    assert len(done) == 2 and not errors
    assert [r["provider"] for r in done] == [{"chat": "openai_chat", "responses": "openai_responses"}.get(kind, kind)] * 2
    assert done[0]["response_ids"] == [101, 102, 103] and done[1]["stream"] is True


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("model, status, sdk_error", [
    ("reject-422", 422, "unprocessable"),
    ("fail-500", 502, "server"),
    ("no-ids", 502, "server"),
])
def test_upstream_failures_in_the_callers_format(fake_stack, kind, model, status, sdk_error):
    sid = running_session(fake_stack.settings.redis_url)
    with pytest.raises(Exception) as info:
        call(kind, clients(fake_stack, sid), model)
    err = info.value
    code = getattr(err, "status_code", None) or getattr(err, "code", None)
    assert code == status
    if kind == "anthropic":
        assert err.body["type"] == "error" and err.body["error"]["type"] in ("invalid_request_error", "api_error")
    elif kind == "google":
        assert isinstance(err, genai_errors.APIError) and err.status in ("INVALID_ARGUMENT", "INTERNAL")
    else:
        assert isinstance(err, openai.APIStatusError) and "message" in err.body
    if model == "no-ids":
        assert "return_token_ids" in str(err)
    done, errors = records(fake_stack, sid)
    assert done == [] and len(errors) == 1 and errors[0]["status_code"] == status


@pytest.mark.parametrize("kind", KINDS)
def test_failure_after_the_stream_started_is_an_error_event(fake_stack, kind):
    sid = running_session(fake_stack.settings.redis_url)
    with pytest.raises(Exception) as info:  # 1.5 s > the 0.3 s keepalive: the stream has begun
        result = call(kind, clients(fake_stack, sid), "slowfail-1500", stream=True)
        if kind == "responses":
            assert [e.type for e in result][:2] == ["response.created", "response.in_progress"]
            failed = [e for e in result if e.type == "response.failed"]
            raise RuntimeError(failed[-1].response.error.message)
    assert "failed late" in str(info.value) or "500" in str(info.value)
    done, errors = records(fake_stack, sid)
    assert done == [] and len(errors) == 1


def test_stream_keepalives_while_a_slow_answer_is_computed(fake_stack):
    sid = running_session(fake_stack.settings.redis_url)
    url = f"{fake_stack.settings.proxy_url}/s/{sid}/v1/messages"
    body = {"model": "slow-1200", "max_tokens": 5, "messages": MSG, "stream": True}
    with httpx.stream("POST", url, json=body, timeout=30) as resp:
        text = b"".join(resp.iter_bytes()).decode()
    events = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events.count("ping") >= 3 and events[-1] == "message_stop"


def test_upstream_timeout_is_504(fake_stack):
    sid = running_session(fake_stack.settings.redis_url)
    with pytest.raises(anthropic.APIStatusError) as info:
        clients(fake_stack, sid)["anthropic"].messages.create(model="slow-5000", max_tokens=5, messages=MSG)
    assert info.value.status_code == 504 and info.value.body["error"]["type"] == "timeout_error"


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_session_in_every_format(fake_stack, kind):
    with pytest.raises(Exception) as info:
        call(kind, clients(fake_stack, "sk-polar-unknown"), "fake")
    err = info.value
    assert (getattr(err, "status_code", None) or getattr(err, "code", None)) == 404
    assert "sk-polar-unknown" in str(err)


PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages",
         "google": "/v1beta/models/fake:generateContent"}


def error_shape(kind, body):
    if kind == "anthropic":
        return body["type"] == "error" and isinstance(body["error"]["message"], str)
    if kind == "google":
        return isinstance(body["error"]["code"], int) and isinstance(body["error"]["status"], str)
    return isinstance(body["error"]["message"], str) and "type" in body["error"]


@pytest.mark.parametrize("kind", KINDS)
def test_malformed_json_and_oversized_bodies(fake_stack, kind):
    sid = running_session(fake_stack.settings.redis_url)
    url = f"{fake_stack.settings.proxy_url}/s/{sid}{PATHS[kind]}"
    bad = httpx.post(url, content=b'{"messages": [', headers={"content-type": "application/json"})
    assert bad.status_code == 400 and error_shape(kind, bad.json())
    big = httpx.post(url, content=b"{" + b" " * 1_200_000 + b"}", headers={"content-type": "application/json"})
    assert big.status_code == 413 and error_shape(kind, big.json())
    done, errors = records(fake_stack, sid)
    assert done == [] and len(errors) == 1  # the 413 is refused before the session is touched


def test_ended_session_is_refused(fake_stack):
    sid = running_session(fake_stack.settings.redis_url)
    r = redis.Redis.from_url(fake_stack.settings.redis_url)
    r.hset(keys.session(sid), "status", "POSTRUN")
    with pytest.raises(anthropic.PermissionDeniedError) as info:
        clients(fake_stack, sid)["anthropic"].messages.create(model="fake", max_tokens=5, messages=MSG)
    assert "POSTRUN" in info.value.body["error"]["message"]


def test_pause_drains_in_flight_calls_and_resume_stamps_the_policy_version(fake_stack):
    sid = running_session(fake_stack.settings.redis_url)
    proxy = fake_stack.settings.proxy_url
    c = clients(fake_stack, sid)["openai"]
    import threading

    slow = threading.Thread(target=lambda: c.chat.completions.create(model="slow-1500", messages=MSG))
    slow.start()
    wait_for(lambda: httpx.get(f"{proxy}/admin/status").json()["inflight"] == 1, timeout=10, interval=0.02)
    t0 = time.monotonic()
    status = httpx.post(f"{proxy}/admin/pause", params={"timeout_seconds": 30}, timeout=60).json()
    assert status["paused"] and status["drained"] and time.monotonic() - t0 > 0.5  # waited for the slow call
    slow.join()
    waiting = threading.Thread(target=lambda: c.chat.completions.create(model="fake", messages=MSG))
    waiting.start()
    time.sleep(0.5)
    assert waiting.is_alive()  # held while paused
    assert httpx.post(f"{proxy}/admin/resume", json={"policy_version": "v2"}).json()["paused"] is False
    waiting.join(timeout=10)
    done, _ = records(fake_stack, sid)
    assert [r["policy_version"] for r in done] == [None, "v2"]
    httpx.post(f"{proxy}/admin/resume", json={"policy_version": None})


def test_connection_failure_fails_over_to_the_next_endpoint(fake_stack, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    port = free_port()
    env = {**os.environ, **fake_stack.settings.to_env(),
           "POLAR_UPSTREAM_URL": f"{dead},{fake_stack.settings.upstream_url}"}
    proc = subprocess.Popen([sys.executable, "-m", "infra.cli.main", "proxy", "--port", str(port)],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _ok(f"http://127.0.0.1:{port}/health"), timeout=30)
        for _ in range(4):  # whatever endpoint each session hashes to first, the call succeeds
            sid = running_session(fake_stack.settings.redis_url)
            sdk = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/s/{sid}/v1", api_key="x", max_retries=0)
            assert sdk.chat.completions.create(model="fake", messages=MSG).choices[0].message.content == "ok"
            done, _ = records(fake_stack, sid)
            assert done[0]["upstream_url"] == fake_stack.settings.upstream_url
    finally:
        proc.send_signal(signal.SIGINT)  # gunicorn's quick shutdown
        proc.wait(timeout=30)


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_models_and_count_tokens(fake_stack):
    sid = running_session(fake_stack.settings.redis_url)
    c = clients(fake_stack, sid)
    assert [m.id for m in c["openai"].models.list()] == ["fake"]
    assert [m.id for m in c["anthropic"].models.list()] == ["fake"]
    assert c["anthropic"].messages.count_tokens(model="fake", messages=MSG).input_tokens > 0
    assert c["google"].models.count_tokens(model="fake", contents="hi").total_tokens > 0
    names = [m.name for m in c["google"].models.list()]
    assert names == ["models/fake"]
    assert httpx.head(f"{fake_stack.settings.proxy_url}/s/{sid}").status_code == 200  # Claude Code's preflight


def test_gemini_stream_without_alt_sse_is_a_json_array(fake_stack):
    sid = running_session(fake_stack.settings.redis_url)
    url = f"{fake_stack.settings.proxy_url}/s/{sid}/v1beta/models/fake:streamGenerateContent"
    resp = httpx.post(url, json={"contents": [{"parts": [{"text": "hi"}]}]}, timeout=30)
    assert resp.headers["content-type"].startswith("application/json")
    chunks = resp.json()
    assert isinstance(chunks, list) and chunks[-1]["candidates"][0]["finishReason"] == "STOP"
