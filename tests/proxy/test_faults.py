"""The real proxy (gunicorn + gevent workers, real sockets) in front of the instant fake engine:
the cases that depend on processes, timing and the network. The rest of the proxy's behaviour
is tested in-process (tests/inproc/test_proxy_app.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import types as gtypes

from infra.embedded_redis import free_port
from pipeline import keys
from tests.support import KINDS, MSG, PROVIDER_OF, call, records, running_session, sid_of, wait_for
from tests.support_http import Scripted

ROOT = Path(__file__).resolve().parents[2]


def clients(stack, key):
    base = f"{stack.settings.proxy_url}/s/{key}"
    return {
        "openai": openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0),
        "anthropic": anthropic.Anthropic(base_url=base, api_key=key, max_retries=0),
        "google": genai.Client(api_key=key, http_options=gtypes.HttpOptions(
            base_url=base, retry_options=gtypes.HttpRetryOptions(attempts=1))),
    }


@pytest.mark.parametrize("kind", KINDS)
def test_success_through_every_provider(fake_stack, kind):
    key = running_session(fake_stack.settings.redis_url)
    call(kind, clients(fake_stack, key), "fake")
    call(kind, clients(fake_stack, key), "fake", stream=True)
    done, errors = records(fake_stack.settings.redis_url, key)
    assert len(done) == 2 and not errors
    assert [r["provider"] for r in done] == [PROVIDER_OF[kind]] * 2
    assert done[0]["response_ids"] == [101, 102, 103] and done[1]["stream"] is True


@pytest.mark.parametrize("fields, why", [({"deadline": "{past}"}, "past its time budget"),
                                         ({"calls_until": "{past}", "deadline": "{future}"}, "past its time budget"),
                                         ({"cancel": "1"}, "being cancelled")])
def test_a_session_past_its_budget_or_being_cancelled_samples_nothing(fake_stack, fields, why):
    """Its agent is being stopped: every provider's SDK gets a 403 naming why, nothing is recorded."""
    import redis

    key = running_session(fake_stack.settings.redis_url)
    r = redis.Redis.from_url(fake_stack.settings.redis_url)
    r.hset(keys.session(sid_of(key)), mapping={"deadline": repr(time.time() + 60)})
    call("openai", clients(fake_stack, key), "fake")  # within the budget: answered
    now = time.time()
    r.hset(keys.session(sid_of(key)),
           mapping={k: v.format(past=repr(now - 0.5), future=repr(now + 60)) for k, v in fields.items()})
    for kind in KINDS:
        with pytest.raises(Exception) as info:
            call(kind, clients(fake_stack, key), "fake")
        assert getattr(info.value, "status_code", None) in (403, None) and why in str(info.value), (kind, info.value)
    done, errors = records(fake_stack.settings.redis_url, key)
    assert len(done) == 1 and not errors


def test_compressed_request_bodies_as_codex_sends_them(fake_stack):
    """Codex CLI sends large Responses bodies zstd-compressed (and gzip is common): undone before
    anything reads them, the record keeping the JSON; a bomb is 413 and an unknown coding 415,
    in the caller's format."""
    import gzip

    import zstandard

    key = running_session(fake_stack.settings.redis_url)
    base = f"{fake_stack.settings.proxy_url}/s/{key}"
    responses = {"model": "fake", "input": [{"role": "user", "content": "hello " * 3000}], "stream": True}
    chat = {"model": "fake", "messages": MSG}
    sent = [("/v1/responses", "zstd", zstandard.ZstdCompressor(level=3).compress(json.dumps(responses).encode())),
            ("/v1/chat/completions", "gzip", gzip.compress(json.dumps(chat).encode()))]
    for path, coding, data in sent:
        answer = httpx.post(base + path, content=data, timeout=30,
                            headers={"content-type": "application/json", "content-encoding": coding})
        assert answer.status_code == 200, answer.text[:300]
    done, errors = records(fake_stack.settings.redis_url, key)
    assert [r["original_request"] for r in done] == [responses, chat] and not errors
    bomb = zstandard.ZstdCompressor().compress(b"{" + b" " * 70_000_000 + b"}")  # past the 64 MiB limit
    refused = httpx.post(base + "/v1/responses", content=bomb, timeout=30,
                         headers={"content-type": "application/json", "content-encoding": "zstd"})
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "request_too_large", refused.text
    unknown = httpx.post(base + "/v1/messages", content=b"...", timeout=30,
                         headers={"content-type": "application/json", "content-encoding": "br"})
    assert unknown.status_code == 415 and unknown.json()["type"] == "error", unknown.text  # Anthropic's shape


def test_stream_keepalives_while_a_slow_answer_is_computed(fake_stack):
    key = running_session(fake_stack.settings.redis_url)
    url = f"{fake_stack.settings.proxy_url}/s/{key}/v1/messages"
    body = {"model": "slow-1200", "max_tokens": 5, "messages": MSG, "stream": True}
    with httpx.stream("POST", url, json=body, timeout=30) as resp:
        text = b"".join(resp.iter_bytes()).decode()
    events = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events.count("ping") >= 3 and events[-1] == "message_stop"


def test_upstream_timeout_is_504(fake_stack):
    key = running_session(fake_stack.settings.redis_url)
    with pytest.raises(anthropic.APIStatusError) as info:
        clients(fake_stack, key)["anthropic"].messages.create(model="slow-5000", max_tokens=5, messages=MSG)
    assert info.value.status_code == 504 and info.value.body["error"]["type"] == "timeout_error"


def test_pause_drains_in_flight_calls_and_resume_stamps_the_policy_version(fake_stack):
    key = running_session(fake_stack.settings.redis_url)
    proxy = fake_stack.settings.proxy_url
    admin = httpx.Client(headers={"x-polar-admin-token": fake_stack.settings.secret("admin_token") or ""}, timeout=60)
    for headers in ({}, {"x-polar-admin-token": "wrong"}):  # pause/resume are for the trainer only
        for method, path in (("POST", "/admin/pause"), ("POST", "/admin/resume"), ("GET", "/admin/status")):
            denied = httpx.request(method, f"{proxy}{path}", headers=headers, json={"policy_version": "evil"})
            assert denied.status_code == 401 and denied.json()["error"]["type"] == "authentication_error"
    c = clients(fake_stack, key)["openai"]
    slow = threading.Thread(target=lambda: c.chat.completions.create(model="slow-1500", messages=MSG))
    slow.start()
    wait_for(lambda: admin.get(f"{proxy}/admin/status").json()["inflight"] == 1, timeout=10, interval=0.02)
    status = admin.post(f"{proxy}/admin/pause", params={"timeout_seconds": 30}).json()
    assert status["paused"] and status["drained"]
    assert len(records(fake_stack.settings.redis_url, key)[0]) == 1  # drained: the slow call's record landed
    slow.join()
    waiting = threading.Thread(target=lambda: c.chat.completions.create(model="fake", messages=MSG))
    waiting.start()
    time.sleep(0.5)  # a held call: nothing to wait for but the absence of an answer
    assert waiting.is_alive()
    assert admin.post(f"{proxy}/admin/resume", json={"policy_version": "v2"}).json()["paused"] is False
    waiting.join(timeout=10)
    done, _ = records(fake_stack.settings.redis_url, key)
    assert [r["policy_version"] for r in done] == [None, "v2"]
    admin.post(f"{proxy}/admin/resume", json={"policy_version": None})


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
            key = running_session(fake_stack.settings.redis_url)
            sdk = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/s/{key}/v1", api_key="x", max_retries=0)
            assert sdk.chat.completions.create(model="fake", messages=MSG).choices[0].message.content == "ok"
            done, _ = records(fake_stack.settings.redis_url, key)
            assert done[0]["upstream_url"] == fake_stack.settings.upstream_url
    finally:
        proc.send_signal(signal.SIGINT)  # gunicorn's quick shutdown
        proc.wait(timeout=30)


def test_a_call_arriving_while_redis_restarts_waits_for_it_then_a_503_after_the_bound(fake_stack, tmp_path):
    """Redis restarting (stopped, back 2 s later): a model call that arrives meanwhile waits and
    is served and recorded, instead of a 503 an SDK's quick retries would not outlast; Redis
    gone for longer than POLAR_PROXY_REDIS_WAIT_SECONDS: the 503, in the caller's format."""
    from infra.embedded_redis import EmbeddedRedis

    server = EmbeddedRedis(data_dir=tmp_path / "redis").start()
    port = free_port()
    env = {**os.environ, **fake_stack.settings.to_env(), "POLAR_REDIS_URL": server.url,
           "POLAR_PROXY_REDIS_WAIT_SECONDS": "6"}
    proc = subprocess.Popen([sys.executable, "-m", "infra.cli.main", "proxy", "--port", str(port)],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _ok(f"http://127.0.0.1:{port}/health"), timeout=30)
        key = running_session(server.url)
        sdk = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/s/{key}/v1", api_key="x", max_retries=0)
        assert sdk.chat.completions.create(model="fake", messages=MSG).choices[0].message.content == "ok"
        server.stop()  # (its append-only file keeps the session)
        answers: list = []
        caller = threading.Thread(target=lambda: answers.append(sdk.chat.completions.create(model="fake", messages=MSG)))
        t0 = time.monotonic()
        caller.start()
        time.sleep(2.0)
        assert not answers
        server.start()  # (from this thread: the server dies with the thread that started it)
        caller.join(timeout=30)
        assert answers and answers[0].choices[0].message.content == "ok"  # it waited for Redis
        assert time.monotonic() - t0 >= 2.0
        # A count (Claude Code's count_tokens) waits as a model call does (it was a 503 once the
        # Redis client's own few retries were spent).
        counter = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}/s/{key}", api_key="x", max_retries=0)
        counts: list = []
        count = threading.Thread(target=lambda: counts.append(counter.messages.count_tokens(
            model="fake", messages=[{"role": "user", "content": "hi"}])))
        server.stop()
        count.start()
        time.sleep(4.0)
        server.start()
        count.join(timeout=30)
        assert counts and counts[0].input_tokens > 0
        # Redis goes away while a call is sampled, and is back within the wait: the turn is kept
        # (it failed with a 503 -- 'internal proxy error' when streamed -- and was lost), once.
        caller = threading.Thread(target=lambda: answers.append(
            sdk.chat.completions.create(model="slow-1500", messages=MSG)))
        caller.start()
        time.sleep(0.5)
        server.stop()
        time.sleep(2.5)
        server.start()
        caller.join(timeout=30)
        assert len(answers) == 2 and answers[1].choices[0].message.content == "ok"
        done, errors = records(server.url, key)
        assert [r["seq"] for r in done] == [1, 2, 3] and errors == []
        server.stop()  # now for good
        t0 = time.monotonic()
        with pytest.raises(openai.InternalServerError) as info:
            sdk.chat.completions.create(model="fake", messages=MSG)
        assert info.value.status_code == 503 and "Redis is unavailable" in info.value.message
        assert time.monotonic() - t0 >= 4  # after the bound, not at once
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        server.stop()


def test_a_large_or_chunked_call_waits_out_a_redis_restart_longer_than_the_body_grace(fake_stack, tmp_path):
    """A body over 64 kB, chunked or compressed is read only once its key is checked, and that
    check waits for a restarting Redis. The body's pace clock ran from the head, so an outage
    longer than its grace (POLAR_HTTP_HEAD_SECONDS, 20 s; 2 s here) got a body already sent
    refused unread: a 400 no SDK retries, where a small call waited and was served."""
    from infra.embedded_redis import EmbeddedRedis

    server = EmbeddedRedis(data_dir=tmp_path / "redis").start()
    port = free_port()
    env = {**os.environ, **fake_stack.settings.to_env(), "POLAR_REDIS_URL": server.url,
           "POLAR_PROXY_REDIS_WAIT_SECONDS": "15", "POLAR_HTTP_HEAD_SECONDS": "2"}
    proc = subprocess.Popen([sys.executable, "-m", "infra.cli.main", "proxy", "--port", str(port)],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _ok(f"http://127.0.0.1:{port}/health"), timeout=30)
        key = running_session(server.url)
        base = f"http://127.0.0.1:{port}/s/{key}/v1"
        sdk = openai.OpenAI(base_url=base, api_key="x", max_retries=0)
        big = [{"role": "user", "content": "word " * 20_000}]  # 100 kB: its key is checked first
        small = json.dumps({"model": "fake", "messages": MSG}).encode()
        answers: dict = {}

        def chunked() -> None:
            resp = httpx.post(f"{base}/chat/completions", content=iter([small[:10], small[10:]]), timeout=60)
            answers["chunked"] = (resp.status_code, resp.text)

        server.stop()
        callers = [threading.Thread(target=lambda: answers.update(big=sdk.chat.completions.create(
            model="fake", messages=big))), threading.Thread(target=chunked)]
        for caller in callers:
            caller.start()
        time.sleep(5.0)  # longer than the grace
        assert not answers
        server.start()
        for caller in callers:
            caller.join(timeout=60)
        assert answers["big"].choices[0].message.content == "ok"
        assert answers["chunked"][0] == 200, answers["chunked"]
        done, errors = records(server.url, key)
        assert len(done) == 2 and errors == []
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        server.stop()


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_hostile_bodies_get_4xx_and_the_servers_stay_up(fake_stack):
    key = running_session(fake_stack.settings.redis_url)
    proxy = fake_stack.settings.proxy_url
    hostile = [b"{" * 5000, b'{"messages": [{"role": "user", "content": "\\udfff"}]}', b"\x00" * 1000,
               b'{"model": 1e999}', b"[" + b"[]," * 100_000 + b"[]]"]
    for raw in hostile:
        for path in (f"/s/{key}/v1/chat/completions", f"/s/{key}/v1/messages", "/v1/responses",
                     f"/s/{key}/v1beta/models/fake:generateContent"):
            status = httpx.post(f"{proxy}{path}", content=raw, headers={"content-type": "application/json"},
                                timeout=30).status_code
            assert 400 <= status < 500, (path, raw[:40], status)
    assert httpx.get(f"{proxy}/health", timeout=10).status_code == 200
    assert call("chat", clients(fake_stack, key), "fake").choices[0].message.content == "ok"


def test_an_oversized_chunked_body_is_413_as_with_a_length(fake_stack):
    # werkzeug cuts a body without Content-Length at the limit (1 MB here) and says nothing.
    key = running_session(fake_stack.settings.redis_url)
    proxy = fake_stack.settings.proxy_url
    head = b'{"model": "fake", "max_tokens": 4, "messages": [{"role": "user", "content": "'
    for size, status in ((1_000_001, 413), (3_000_000, 413), (1_000_000, 200)):
        body = head + b"a" * (size - len(head) - 4) + b'"}]}'
        assert len(body) == size
        for path in (f"/s/{key}/v1/chat/completions", f"/s/{key}/v1/messages"):
            for chunked in (False, True):
                answer = httpx.post(f"{proxy}{path}", content=iter([body[:1000], body[1000:]]) if chunked else body,
                                    headers={"content-type": "application/json"}, timeout=30)
                assert answer.status_code == status, (size, path.rsplit("/", 1)[-1], chunked, answer.text[:200])
                if status == 413:
                    assert "exceeds 1000000 bytes" in answer.text


class _HangingEngine(Scripted):
    """An engine that takes every chat call and never answers: it waits for its connection to
    close and notes it (vLLM aborts a request then). Other paths (model cards, health) get an
    empty 200."""

    def __init__(self) -> None:
        self.received = threading.Event()
        self.closed = threading.Event()
        super().__init__([self._answer] * 100)
        self.port = self.sock.getsockname()[1]

    def _answer(self, conn, request: bytes) -> str:
        if b"/chat/completions" not in request.split(b"\r\n", 1)[0]:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
            return "close"
        self.received.set()
        conn.settimeout(60)
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass
        self.closed.set()
        return "close"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_client_that_leaves_mid_call_aborts_the_engine_call(fake_stack, stream):
    """An agent killed at its deadline closes its connection while the engine samples: the proxy
    closes its engine connection at once (vLLM and SGLang abort the request then: no GPU time
    spent on an answer nobody reads), keeps an error record saying so, and the call leaves the
    session's in-flight count (POSTRUN's drain does not wait for it)."""
    import socket

    import redis

    engine = _HangingEngine()
    port = free_port()
    env = {**os.environ, **fake_stack.settings.to_env(), "POLAR_UPSTREAM_URL": f"http://127.0.0.1:{engine.port}",
           "POLAR_UPSTREAM_TIMEOUT_SECONDS": "120"}
    proc = subprocess.Popen([sys.executable, "-m", "infra.cli.main", "proxy", "--port", str(port)],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _ok(f"http://127.0.0.1:{port}/health"), timeout=30)
        key = running_session(fake_stack.settings.redis_url)
        body = json.dumps({"model": "fake", "messages": MSG, "stream": stream}).encode()
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(b"POST /s/%s/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (key.encode(), len(body), body))
        assert engine.received.wait(30)
        assert not engine.closed.wait(0.5)  # the engine is still "sampling"
        client.close()  # the agent is gone
        assert engine.closed.wait(15), "the proxy kept its engine call open after its client left"
        r = redis.Redis.from_url(fake_stack.settings.redis_url)
        wait_for(lambda: records(fake_stack.settings.redis_url, key)[1], timeout=10, interval=0.05)
        done, errors = records(fake_stack.settings.redis_url, key)
        assert not done and [(e["status_code"], e["error_type"]) for e in errors] == [(499, "ClientGone")]
        assert r.zcard(keys.session_calls(sid_of(key))) == 0
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        engine.close()


def _half_closed_call(proxy_url: str, key: str) -> bytes:
    """A chat call from a client that shuts its write side after sending (HTTP allows it; no
    harness does it): what it reads back."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(proxy_url)
    body = json.dumps({"model": "slow-500", "messages": MSG}).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as client:
        client.sendall(b"POST /s/%s/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (key.encode(), len(body), body))
        client.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    return answer


def test_a_half_closing_client_is_taken_for_gone_unless_the_watch_is_off(fake_stack):
    """Shutting the write side looks exactly like leaving (an EOF): by default the call is
    aborted (499, a ClientGone record); POLAR_ABORT_ON_CLIENT_CLOSE=false answers such clients."""
    key = running_session(fake_stack.settings.redis_url)
    assert _half_closed_call(fake_stack.settings.proxy_url, key).startswith(b"HTTP/1.1 499 Client Closed Request")
    port = free_port()
    env = {**os.environ, **fake_stack.settings.to_env(), "POLAR_ABORT_ON_CLIENT_CLOSE": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "infra.cli.main", "proxy", "--port", str(port)],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _ok(f"http://127.0.0.1:{port}/health"), timeout=30)
        key = running_session(fake_stack.settings.redis_url)
        answer = _half_closed_call(f"http://127.0.0.1:{port}", key)
        assert answer.startswith(b"HTTP/1.1 200") and b'"content":"ok"' in answer
        assert len(records(fake_stack.settings.redis_url, key)[0]) == 1
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def test_a_stream_parked_by_a_pause_whose_client_leaves_stops_counting_at_once(fake_stack):
    """An agent killed (deadline, cancel) while its streamed call waits out a weight-sync pause:
    the parked call leaves its session's calls in flight when its client goes, not at the
    resume -- POSTRUN's drain waited for it (inflight_drain_seconds) and the trajectory said a
    call was left out. It is kept as an aborted call (ClientGone), as one whose client leaves
    while the engine samples: not a call the service lost (calls_unrecorded)."""
    import socket

    import redis

    key = running_session(fake_stack.settings.redis_url)
    proxy = fake_stack.settings.proxy_url
    admin = httpx.Client(headers={"x-polar-admin-token": fake_stack.settings.secret("admin_token") or ""}, timeout=60)
    r = redis.Redis.from_url(fake_stack.settings.redis_url)
    calls = keys.session_calls(sid_of(key))
    assert admin.post(f"{proxy}/admin/pause", json={"holder": "parked-client-test", "timeout_seconds": 5}).json()["paused"]
    try:
        host, port = proxy.rsplit("/", 1)[-1].split(":")
        body = json.dumps({"model": "fake", "messages": MSG, "stream": True}).encode()
        client = socket.create_connection((host, int(port)), timeout=10)
        client.sendall(b"POST /s/%s/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (key.encode(), len(body), body))
        assert client.recv(65536).startswith(b"HTTP/1.1 200")  # parked: the stream opened, kept alive
        wait_for(lambda: r.zcard(calls) == 1, timeout=10, interval=0.05)
        client.close()  # the agent is gone
        # Within a second, well before the parked wait's own bound (upstream_timeout_seconds, 3 s here).
        wait_for(lambda: r.zcard(calls) == 0, timeout=1.5, interval=0.05)
        assert admin.get(f"{proxy}/admin/status").json()["paused"]
        done, errors = records(fake_stack.settings.redis_url, key)
        assert not done and [(e["status_code"], e["error_type"]) for e in errors] == [(499, "ClientGone")]
    finally:
        admin.post(f"{proxy}/admin/resume", json={"holder": "parked-client-test"})


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed (parked)"])
def test_a_call_whose_pause_outlasts_its_wait_leaves_an_error_record(fake_stack, stream):
    """A call that waits out a weight-sync pause longer than it may (upstream_timeout_seconds, 3 s
    here) is answered 504 -- but it had been numbered at admission, and was released with no
    record: POSTRUN then counted it in ``calls_unrecorded`` and, as the session's last call,
    named "the proxy or its Redis failed" as the cause. It leaves its own error record now."""
    import redis

    key = running_session(fake_stack.settings.redis_url)
    proxy = fake_stack.settings.proxy_url
    admin = httpx.Client(headers={"x-polar-admin-token": fake_stack.settings.secret("admin_token") or ""}, timeout=60)
    holder = f"outlasted-{stream}"
    assert admin.post(f"{proxy}/admin/pause", json={"holder": holder, "timeout_seconds": 5}).json()["paused"]
    try:
        client = openai.OpenAI(base_url=f"{proxy}/s/{key}/v1", api_key="x", max_retries=0, timeout=30)
        with pytest.raises(openai.APIError) as caught:
            if stream:
                list(client.chat.completions.create(model="fake", messages=MSG, stream=True))
            else:
                client.chat.completions.create(model="fake", messages=MSG)
        assert "weight sync" in str(caught.value)
    finally:
        admin.post(f"{proxy}/admin/resume", json={"holder": holder})
    done, errors = records(fake_stack.settings.redis_url, key)
    assert not done
    assert [(e["seq"], e["status_code"], e["error_type"]) for e in errors] == [(1, 504, "UpstreamTimeout")], errors
    assert "weight sync" in errors[0]["message"]
    # Every admitted call has its record: none is counted as lost.
    from pipeline.schemas import UpstreamErrorRecord
    from workers.stages.postrun import calls_unrecorded

    admitted = int(redis.Redis.from_url(fake_stack.settings.redis_url).hget(keys.session(sid_of(key)), "seq") or 0)
    assert admitted == 1 and calls_unrecorded(admitted, [], [UpstreamErrorRecord.model_validate(e) for e in errors]) == 0
