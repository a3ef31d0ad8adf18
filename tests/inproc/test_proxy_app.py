"""The proxy app in-process, called by the vendors' own SDKs: every provider answers, every
failure reaches the caller in its own provider's format and never becomes a completion record.
(tests/proxy runs the timing- and socket-dependent cases against the real gunicorn/gevent proxy.)"""

from __future__ import annotations

import json
import threading
import time

import anthropic
import openai
import pytest
from google.genai import errors as genai_errors

from infra import fake_upstream
from pipeline.credentials import new_session_id, new_session_key
from pipeline.status import SessionStatus
from pipeline.stores.proxy_control import ProxyControlStore
from pipeline.stores.sessions import SessionStore
from proxy.app import create_app
from proxy.upstream import WSGITransport
from tests.inproc.conftest import ADMIN_TOKEN, UPSTREAM, admin_client, proxy_settings, sdk_clients
from tests.support import KINDS, MSG, PATHS, PROVIDER_OF, call, error_shape, records, running_session, sid_of, wait_for


@pytest.mark.parametrize("kind", KINDS)
def test_success_through_every_provider(proxy_app, redis_url, kind):
    key = running_session(redis_url)
    call(kind, sdk_clients(proxy_app, key), "fake")
    call(kind, sdk_clients(proxy_app, key), "fake", stream=True)
    done, errors = records(redis_url, key)
    assert len(done) == 2 and not errors
    assert [r["provider"] for r in done] == [PROVIDER_OF[kind]] * 2
    assert done[0]["response_ids"] == [101, 102, 103] and done[1]["stream"] is True
    assert [r["seq"] for r in done] == [1, 2]
    assert done[0]["model"] == "fake"  # Gemini names the model in the URL, the record still has it


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("model, status", [("reject-422", 422), ("fail-500", 502), ("no-ids", 502), ("abort", 502)])
def test_upstream_failures_in_the_callers_format(proxy_app, redis_url, kind, model, status):
    key = running_session(redis_url)
    with pytest.raises(Exception) as info:
        call(kind, sdk_clients(proxy_app, key), model)
    err = info.value
    assert (getattr(err, "status_code", None) or getattr(err, "code", None)) == status
    if kind == "anthropic":
        assert err.body["type"] == "error" and err.body["error"]["type"] in ("invalid_request_error", "api_error")
    elif kind == "google":
        assert isinstance(err, genai_errors.APIError) and err.status in ("INVALID_ARGUMENT", "INTERNAL")
    else:
        assert isinstance(err, openai.APIStatusError) and "message" in err.body
    if model == "no-ids":
        assert "return_token_ids" in str(err)
    if model == "abort":  # a cut answer is not passed off as a finished one
        assert "aborted the request" in str(err)
    done, errors = records(redis_url, key)
    assert done == [] and len(errors) == 1 and errors[0]["status_code"] == status


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_that_cannot_be_rendered_is_kept_as_an_error_never_as_a_completion(proxy_app, redis_url, r,
                                                                                     monkeypatch, kind, stream):
    """A fault in rendering the caller's answer (a bug, or a value its encoder refuses -- wide
    integers were one) after the engine answered: the caller gets a 502 it may retry, and the
    session holds an error record, not a completion the agent never received (each SDK retry
    would have recorded another)."""
    from proxy.providers import PROVIDERS

    def broken(self, turn, parsed):
        raise RuntimeError("render bug")

    monkeypatch.setattr(type(PROVIDERS[PROVIDER_OF[kind]]), "render", broken)
    key = running_session(redis_url)
    with pytest.raises(Exception) as info:
        call(kind, sdk_clients(proxy_app, key), "fake", stream=stream)
    assert (getattr(info.value, "status_code", None) or getattr(info.value, "code", None)) == 502
    assert "internal proxy error: RuntimeError" in str(info.value)
    done, errors = records(redis_url, key)
    assert done == [] and len(errors) == 1 and errors[0]["status_code"] == 502
    assert SessionStore(r).inflight_calls(sid_of(key)) == 0


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("credential", ["unknown", "session_id", "other_sessions_key", "ended"])
def test_only_a_live_sessions_own_key_is_accepted_in_every_format(proxy_app, redis_url, r, kind, credential):
    key = running_session(redis_url)
    other = running_session(redis_url)
    presented = {"unknown": new_session_key(new_session_id()), "session_id": sid_of(key),
                 # the path names one session, the secret is another's
                 "other_sessions_key": key[:-48] + other[-48:], "ended": key}[credential]
    if credential == "ended":
        SessionStore(r).transition(sid_of(key), SessionStatus.POSTRUN)
    with pytest.raises(Exception) as info:
        call(kind, sdk_clients(proxy_app, presented), "fake")
    err = info.value
    assert (getattr(err, "status_code", None) or getattr(err, "code", None)) == (403 if credential == "ended" else 404)
    # No secret is echoed back in what the proxy answered (SDKs' own messages may quote the URL they called).
    answered = json.dumps(getattr(err, "body", None) or getattr(err, "details", None))
    assert answered != "null" and key[-48:] not in answered and other[-48:] not in answered, answered
    assert records(redis_url, key) == ([], []) and records(redis_url, other) == ([], [])


@pytest.mark.parametrize("kind", KINDS)
def test_malformed_json_and_oversized_bodies(proxy_app, redis_url, kind):
    key = running_session(redis_url)
    client = proxy_app.test_client()
    bad = client.post(f"/s/{key}{PATHS[kind]}", data=b'{"messages": [', content_type="application/json")
    assert bad.status_code == 400 and error_shape(kind, bad.get_json())
    big = client.post(f"/s/{key}{PATHS[kind]}", data=b"{" + b" " * 1_200_000 + b"}", content_type="application/json")
    assert big.status_code == 413 and error_shape(kind, big.get_json())
    done, errors = records(redis_url, key)
    assert done == [] and len(errors) == 1  # the 413 is refused before the session is touched


@pytest.mark.parametrize("kind", KINDS)
def test_a_refused_call_is_refused_as_such_whatever_its_body(proxy_app, redis_url, r, kind):
    """The body is parsed while the admission's round trip runs: the verdict still comes first."""
    key = running_session(redis_url)
    client = proxy_app.test_client()
    unknown = new_session_key(new_session_id())
    bad = client.post(f"/s/{unknown}{PATHS[kind]}", data=b'{"messages": [', content_type="application/json")
    assert bad.status_code == 404 and error_shape(kind, bad.get_json())
    SessionStore(r).transition(sid_of(key), SessionStatus.POSTRUN)
    ended = client.post(f"/s/{key}{PATHS[kind]}", data=b'{"messages": [', content_type="application/json")
    assert ended.status_code == 403 and error_shape(kind, ended.get_json())
    assert records(redis_url, key) == ([], []) and records(redis_url, unknown) == ([], [])
    assert ProxyControlStore(r).inflight() == 0 and SessionStore(r).inflight_calls(sid_of(key)) == 0


def _nested(levels: int):
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("kind", KINDS)
def test_a_body_nesting_deeper_than_128_levels_is_refused(proxy_app, redis_url, kind):
    key = running_session(redis_url)
    client = proxy_app.test_client()
    deep = client.post(f"/s/{key}{PATHS[kind]}", json={"model": "fake", "messages": MSG, "extra": _nested(128)})
    assert deep.status_code == 400 and error_shape(kind, deep.get_json())
    assert "nests deeper than 128 levels" in str(deep.get_json())
    assert len(records(redis_url, key)[1]) == 1


def test_a_body_nesting_exactly_128_levels_is_served(proxy_app, redis_url):
    key = running_session(redis_url)
    ok = proxy_app.test_client().post(f"/s/{key}/v1/chat/completions",
                                      json={"model": "fake", "messages": MSG, "extra": _nested(127)})
    assert ok.status_code == 200 and ok.get_json()["choices"][0]["message"]["content"] == "ok"


def test_ended_session_is_refused(proxy_app, redis_url, r):
    key = running_session(redis_url)
    SessionStore(r).transition(sid_of(key), SessionStatus.POSTRUN)
    with pytest.raises(anthropic.PermissionDeniedError) as info:
        sdk_clients(proxy_app, key)["anthropic"].messages.create(model="fake", max_tokens=5, messages=MSG)
    assert "POSTRUN" in info.value.body["error"]["message"]


def test_models_count_tokens_and_preflight(proxy_app, redis_url):
    key = running_session(redis_url)
    c = sdk_clients(proxy_app, key)
    assert [m.id for m in c["openai"].models.list()] == ["fake"]
    assert [m.id for m in c["anthropic"].models.list()] == ["fake"]
    assert c["anthropic"].messages.count_tokens(model="fake", messages=MSG).input_tokens > 0
    assert c["google"].models.count_tokens(model="fake", contents="hi").total_tokens > 0
    assert [m.name for m in c["google"].models.list()] == ["models/fake"]
    assert c["openai"].models.retrieve("fake").id == "fake"
    with pytest.raises(openai.NotFoundError):
        c["openai"].models.retrieve("nope")
    assert proxy_app.test_client().head(f"/s/{key}").status_code == 200  # Claude Code's preflight


def test_model_cards_do_not_name_the_engines_model_path(proxy_app, redis_url):
    """vLLM's cards say where the model lies on the engine host (``root``): not the agents' business."""
    key = running_session(redis_url)
    listed = proxy_app.test_client().get(f"/s/{key}/v1/models").get_json()["data"]
    assert [m["id"] for m in listed] == ["fake"] and listed[0]["max_model_len"] == 131072
    assert not any("root" in m or "permission" in m for m in listed), listed
    one = proxy_app.test_client().get(f"/s/{key}/v1/models/fake").get_json()
    assert one["id"] == "fake" and "root" not in one


@pytest.mark.parametrize("path", ["/v1/models", "/v1/models/fake", "/v1beta/models", "/s/not-a-key/v1/models"])
def test_the_model_list_needs_a_sessions_key(proxy_app, redis_url, path):
    """It answered anyone; now a stranger gets the error a model call without a key gets."""
    resp = proxy_app.test_client().get(path)
    assert resp.status_code in (401, 404) and "fake" not in resp.get_data(as_text=True), resp.get_data(as_text=True)
    key = running_session(redis_url)  # the same list with a session's key as a header
    listed = proxy_app.test_client().get("/v1/models", headers={"Authorization": f"Bearer {key}"}).get_json()
    assert [m["id"] for m in listed["data"]] == ["fake"]


def test_an_ended_sessions_key_reads_nothing_either(proxy_app, redis_url, r):
    """Stored responses, their input items and token counts need a live session's key, as calls do."""
    key = running_session(redis_url)
    c = sdk_clients(proxy_app, key)
    stored = c["openai"].responses.create(model="fake", input="hi", store=True)
    assert c["openai"].responses.retrieve(stored.id).id == stored.id  # live: readable
    SessionStore(r).transition(sid_of(key), SessionStatus.POSTRUN)
    for read in (lambda: c["openai"].responses.retrieve(stored.id),
                 lambda: c["openai"].responses.input_items.list(stored.id),
                 lambda: c["openai"].responses.delete(stored.id),
                 lambda: c["anthropic"].messages.count_tokens(model="fake", messages=MSG)):
        with pytest.raises((openai.PermissionDeniedError, anthropic.PermissionDeniedError)) as info:
            read()
        assert "POSTRUN" in str(info.value.body)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "soon"])
def test_pause_needs_a_finite_timeout(proxy_app, value):
    resp = admin_client(proxy_app).post("/admin/pause", query_string={"timeout_seconds": value})
    assert resp.status_code == 400 and "finite number" in resp.get_json()["error"]["message"]
    assert admin_client(proxy_app).get("/admin/status").get_json()["paused"] is False


@pytest.mark.parametrize("route, params", [("/admin/pause", {"force": "maybe"}),
                                           ("/admin/pause", {"policy_version": "3"}),
                                           ("/admin/resume", {"policy_verison": "3"}),
                                           ("/admin/resume", {"holder": "h", "version": 3})])
def test_an_admin_parameter_the_route_does_not_take_is_a_400_not_ignored(proxy_app, route, params):
    """A misspelt ``policy_verison`` resumed with no new version (every later record stamped with
    the old one) and a pause took its hold whatever else it was sent. Found by a probe."""
    admin = admin_client(proxy_app)
    for sent in ({"json": params}, {"query_string": params}):
        resp = admin.post(route, **sent)
        assert resp.status_code == 400 and "unknown parameter" in resp.get_json()["error"]["message"], resp.data
    status = admin.get("/admin/status").get_json()
    assert status["paused"] is False and not status.get("holders")


def test_gemini_stream_without_alt_sse_is_a_json_array(proxy_app, redis_url):
    key = running_session(redis_url)
    resp = proxy_app.test_client().post(f"/s/{key}/v1beta/models/fake:streamGenerateContent",
                                        json={"contents": [{"parts": [{"text": "hi"}]}]})
    assert resp.headers["content-type"].startswith("application/json")
    chunks = resp.get_json()
    assert isinstance(chunks, list) and chunks[-1]["candidates"][0]["finishReason"] == "STOP"


@pytest.mark.parametrize("kind", KINDS)
def test_failure_after_the_stream_started_is_an_error_event(proxy_app, redis_url, kind):
    key = running_session(redis_url)
    with pytest.raises(Exception) as info:  # 0.8 s > the 0.3 s keepalive: the stream has begun
        result = call(kind, sdk_clients(proxy_app, key), "slowfail-800", stream=True)
        if kind == "responses":
            assert [e.type for e in result][:2] == ["response.created", "response.in_progress"]
            failed = [e for e in result if e.type == "response.failed"]
            raise RuntimeError(failed[-1].response.error.message)
    assert "failed late" in str(info.value) or "500" in str(info.value)
    done, errors = records(redis_url, key)
    assert done == [] and len(errors) == 1


def test_an_unreachable_endpoint_fails_over_to_the_next(r, redis_url, tmp_path):
    dead = "http://dead.test"
    transport = WSGITransport(apps={dead: None, UPSTREAM: fake_upstream.app})
    app = create_app(proxy_settings(redis_url, tmp_path).replace(upstream_url=f"{dead},{UPSTREAM}"), transport)
    sessions = 0
    # Whichever endpoint a session hashes to first, its call succeeds; sessions until some
    # hashed to the dead one first (each does with odds 1/2; six in a row missing it was a flake).
    while sessions < 6 or (sessions < 40 and not any(c[0] == dead for c in transport.calls)):
        key = running_session(redis_url)
        assert call("chat", sdk_clients(app, key), "fake").choices[0].message.content == "ok"
        done, _ = records(redis_url, key)
        assert done[0]["upstream_url"] == UPSTREAM
        sessions += 1
    tried_dead = [c for c in transport.calls if c[0] == dead]
    assert tried_dead, "no session hashed to the dead endpoint first; the test proves nothing"


def test_a_call_waits_for_an_engine_that_is_restarting(r, redis_url, tmp_path):
    """No endpoint accepts connections for a while (an engine restarting): the call waits for it
    (POLAR_PROXY_ENGINE_WAIT_SECONDS) and is sampled once it is back, instead of a 502 -- codex
    gives up after five of those and the session ends."""
    engine = "http://restarting.test"
    transport = WSGITransport(apps={engine: None})
    app = create_app(proxy_settings(redis_url, tmp_path).replace(upstream_url=engine), transport)
    key = running_session(redis_url)
    back = threading.Timer(0.8, lambda: transport.apps.__setitem__(engine, fake_upstream.app))
    back.start()
    assert call("chat", sdk_clients(app, key), "fake").choices[0].message.content == "ok"
    back.join()
    tries = [c for c in transport.calls if c[2] == "/v1/chat/completions"]
    assert len(tries) >= 2  # refused while away, then sent once
    done, errors = records(redis_url, key)
    assert len(done) == 1 and not errors


def test_pause_holds_new_calls_until_resume_stamps_the_policy_version(proxy_app, redis_url):
    key = running_session(redis_url)
    admin = admin_client(proxy_app)
    c = sdk_clients(proxy_app, key)["openai"]
    status = admin.post("/admin/pause", query_string={"timeout_seconds": 5}).get_json()
    assert status["paused"] and status["drained"]
    waiting = threading.Thread(target=lambda: c.chat.completions.create(model="fake", messages=MSG))
    waiting.start()
    wait_for(lambda: admin.get("/admin/status").get_json()["inflight"] == 0 and waiting.is_alive(), timeout=5)
    time.sleep(0.3)  # the call would have finished in milliseconds if it were not held
    assert waiting.is_alive() and records(redis_url, key)[0] == []
    assert admin.post("/admin/resume", json={"policy_version": "v2"}).get_json()["paused"] is False
    waiting.join(timeout=10)
    done, _ = records(redis_url, key)
    assert [rec["policy_version"] for rec in done] == ["v2"]


def test_calls_waiting_out_a_pause_are_never_counted_in_flight(r, redis_url, tmp_path):
    """A pause drains what runs; calls that arrive during it wait without holding a lease, so a
    pause taken while others wait (a trainer's next weight sync, a proxy restarted under load)
    still reports drained. (The calls may wait 10 s here, the watching 2 s: under load the
    fixture's 3 s ran out mid-watch and the calls ended 504.)"""
    import redis

    from pipeline import keys

    proxy_app = create_app(proxy_settings(redis_url, tmp_path, admin_token=ADMIN_TOKEN, upstream_timeout_seconds=10),
                           transport=WSGITransport(fake_upstream.app))
    r = redis.Redis.from_url(redis_url)
    admin = admin_client(proxy_app)
    hold = {"holder": "trainer"}  # pausing again as the same holder renews its hold (no second holder)
    assert admin.post("/admin/pause", query_string={"timeout_seconds": 5, **hold}).get_json()["drained"]
    clients = [sdk_clients(proxy_app, running_session(redis_url))["openai"] for _ in range(4)]
    waiting = [threading.Thread(target=lambda c=c: c.chat.completions.create(model="fake", messages=MSG))
               for c in clients]
    for t in waiting:
        t.start()
    try:
        time.sleep(0.3)  # every call is at the gate
        seen, watch_until = [], time.monotonic() + 2.0
        while time.monotonic() < watch_until:  # 2 s: forty rounds of each waiting call's re-check
            seen.append(r.zcard(keys.PROXY_CALLS))
            time.sleep(0.005)
        assert all(t.is_alive() for t in waiting)
        assert max(seen) == 0, f"waiting calls held leases in {sum(1 for n in seen if n)} of {len(seen)} reads"
        again = admin.post("/admin/pause", query_string={"timeout_seconds": 2, **hold}).get_json()
        assert again["paused"] and again["drained"] and again["holders"] == 1, again
    finally:
        resumed = admin.post("/admin/resume", json=hold)
        for t in waiting:
            t.join(timeout=10)
    assert resumed.status_code == 200 and resumed.get_json()["paused"] is False
    assert not any(t.is_alive() for t in waiting)


def test_base_url_without_session_in_path_uses_the_api_key(proxy_app, redis_url):
    key = running_session(redis_url)
    resp = proxy_app.test_client().post("/v1/messages", json={"model": "fake", "max_tokens": 5, "messages": MSG},
                                        headers={"x-api-key": key, "anthropic-version": "2023-06-01"})
    assert resp.status_code == 200 and resp.get_json()["type"] == "message"
    assert records(redis_url, key)[0][0]["provider"] == "anthropic"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("raw", [b'{"model": "fake", "messages": [{"role": "user", "content": "\\ud800"}]}',
                                 b'{"contents": ' + b"[" * 300 + b"]" * 300 + b"}",
                                 b"\xff\xfe not utf-8"])
def test_invalid_unicode_and_deep_nesting_are_400_in_the_callers_format(proxy_app, redis_url, kind, raw):
    key = running_session(redis_url)
    resp = proxy_app.test_client().post(f"/s/{key}{PATHS[kind]}", data=raw, content_type="application/json")
    assert resp.status_code == 400 and error_shape(kind, resp.get_json())


def test_a_model_call_leaves_no_reference_cycles(proxy_app, redis_url):
    """Served from WSGI, a call's request, body and answer are freed as soon as it ends (a cycle
    would keep them, the body included, until a garbage collection walks them)."""
    import gc
    import io
    import json

    key = running_session(redis_url)
    body = json.dumps({"model": "fake", "messages": MSG}).encode()

    def one(stream: bool) -> None:
        raw = body if not stream else json.dumps({"model": "fake", "messages": MSG, "stream": True}).encode()
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": f"/s/{key}/v1/chat/completions", "QUERY_STRING": "",
                   "SERVER_NAME": "proxy.test", "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1",
                   "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(raw)), "wsgi.input": io.BytesIO(raw),
                   "wsgi.errors": io.StringIO(), "wsgi.url_scheme": "http", "wsgi.version": (1, 0),
                   "wsgi.multithread": False, "wsgi.multiprocess": True, "wsgi.run_once": False}
        status = []
        assert b"".join(proxy_app(environ, lambda s, h, e=None: status.append(s))) and status[0].startswith("200")

    for stream in (False, True):
        one(stream)  # warm: first-use caches
        gc.collect()
        gc.disable()
        try:
            for _ in range(5):
                one(stream)
            assert gc.collect() == 0
        finally:
            gc.enable()


def test_model_names_holding_a_slash_as_vllm_serves_checkpoints(proxy_app, redis_url):
    """vLLM serves a checkpoint under its path ("Qwen/Qwen3-8B"); harnesses pass that name on:
    Gemini's SDK puts it into the URL (models/Qwen/Qwen3-8B:generateContent), model lookups too."""
    key = running_session(redis_url)
    c = sdk_clients(proxy_app, key)
    name = "Qwen/Qwen3-8B"
    assert c["google"].models.generate_content(model=name, contents="hi").text
    assert "".join(chunk.text or "" for chunk in c["google"].models.generate_content_stream(model=name, contents="hi"))
    assert c["google"].models.count_tokens(model=name, contents="hi").total_tokens > 0
    done, _ = records(redis_url, key)
    assert [r["model"] for r in done] == [name, name]
    for client in ("openai", "anthropic"):  # looked up by that name: the engine's "not found", not "no such path"
        with pytest.raises((openai.NotFoundError, anthropic.NotFoundError)) as info:
            c[client].models.retrieve("org/nope")
        assert "not served" not in str(info.value) and "org/nope" in str(info.value)


def test_chat_stream_null_is_not_streamed(proxy_app, redis_url):
    """The OpenAI SDK types ``stream`` as optional and sends ``null`` when given None (the spec
    marks it nullable): a plain answer, not a 400."""
    key = running_session(redis_url)
    answer = sdk_clients(proxy_app, key)["openai"].chat.completions.create(model="fake", messages=MSG, stream=None)
    assert answer.choices[0].message.content and records(redis_url, key)[0][0]["stream"] is False
    with pytest.raises(openai.BadRequestError, match="'stream' must be a boolean"):
        sdk_clients(proxy_app, key)["openai"].chat.completions.create(model="fake", messages=MSG, stream="yes")


def test_every_admitted_call_answers_with_a_request_id_naming_its_record(proxy_app, redis_url):
    """The id an SDK logs (``_request_id``: OpenAI's ``x-request-id``, Anthropic's ``request-id``
    header and error body) names the session and the seq of the call's record, never its key."""
    key = running_session(redis_url)
    sdks = sdk_clients(proxy_app, key)
    sid = sid_of(key).removeprefix("sess-")
    chat = sdks["openai"].chat.completions.create(model="fake", messages=MSG)
    assert chat._request_id == f"req_{sid}_1"
    streamed = sdks["anthropic"].messages.with_raw_response.create(model="fake", max_tokens=8, messages=MSG,
                                                                   stream=True)
    assert streamed.headers["request-id"] == f"req_{sid}_2" and key not in str(streamed.headers)
    with pytest.raises(anthropic.UnprocessableEntityError) as info:
        sdks["anthropic"].messages.create(model="reject-422", max_tokens=8, messages=MSG)
    assert info.value.request_id == f"req_{sid}_3" and info.value.body["request_id"] == f"req_{sid}_3"
    with pytest.raises(anthropic.APIStatusError) as late:  # failed after the stream began: the error event has it
        list(sdks["anthropic"].messages.create(model="slowfail-800", max_tokens=8, messages=MSG, stream=True))
    assert late.value.body["request_id"] == f"req_{sid}_4"
    done, errors = records(redis_url, key)
    assert [r["seq"] for r in done] == [1, 2] and [e["seq"] for e in errors] == [3, 4]
    with pytest.raises(anthropic.NotFoundError) as refused:  # never admitted: no id to give
        sdk_clients(proxy_app, new_session_key(new_session_id()))["anthropic"].messages.create(
            model="fake", max_tokens=8, messages=MSG)
    assert refused.value.request_id is None and refused.value.body["request_id"] is None
