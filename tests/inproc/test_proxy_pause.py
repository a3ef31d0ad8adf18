"""Weight sync's pause as held, not set: each pause has a holder and a lease (a trainer that dies
while paused releases the fleet when its lease lapses), one holder's resume never ends
another's, a resume never stamps a new version over a call admitted under the old one, and the
control surface answers nobody on a proxy without an admin token. The proxy app in-process on a
real Redis."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from infra import fake_upstream
from pipeline import keys
from pipeline.stores.proxy_control import ProxyControlStore
from proxy.app import create_app
from proxy.upstream import WSGITransport
from tests.inproc.conftest import ADMIN_TOKEN, admin_client, proxy_settings, sdk_clients
from tests.support import MSG, records, running_session, wait_for


def pause(admin, **params):
    resp = admin.post("/admin/pause", query_string={"timeout_seconds": 0, **params})
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()


def status(admin) -> dict:
    return admin.get("/admin/status").get_json()


def test_a_pause_nobody_renews_ends_when_its_lease_lapses(proxy_app, redis_url, r):
    """The trainer killed mid-update: its lease runs out and held calls go on, with no resume."""
    admin = admin_client(proxy_app)
    held = pause(admin, lease_seconds=2)  # (long enough that the call below surely finds it held)
    assert held["paused"] and held["holders"] == 1 and held["lease_seconds"] == 2 and held["holder"]
    assert held["lease_expires_at"] == pytest.approx(time.time() + 2, abs=0.5)
    assert 0 < r.pttl(keys.PROXY_PAUSED) <= 2000  # Redis itself ends it
    key = running_session(redis_url)
    c = sdk_clients(proxy_app, key)["openai"]
    waiting = threading.Thread(target=lambda: c.chat.completions.create(model="fake", messages=MSG))
    waiting.start()
    time.sleep(0.3)
    assert waiting.is_alive() and records(redis_url, key)[0] == []  # held by the pause
    waiting.join(timeout=10)
    assert not waiting.is_alive() and len(records(redis_url, key)[0]) == 1
    after = status(admin)
    assert after["paused"] is False and after["holders"] == 0 and after["lease_expires_latest"] is None
    assert not r.exists(keys.PROXY_PAUSED, keys.PROXY_PAUSE_HOLDERS)


def test_pausing_again_with_the_same_holder_renews_its_lease(proxy_app):
    admin = admin_client(proxy_app)
    first = pause(admin, lease_seconds=1)
    again = pause(admin, lease_seconds=30, holder=first["holder"])
    assert again["holder"] == first["holder"] and again["holders"] == 1
    assert again["lease_expires_at"] > first["lease_expires_at"] + 20
    time.sleep(1.3)  # past the first lease
    assert status(admin)["paused"] is True
    assert admin.post("/admin/resume", json={"holder": first["holder"]}).get_json()["paused"] is False


def test_one_holders_resume_leaves_the_proxy_paused_for_the_other(proxy_app, r):
    admin = admin_client(proxy_app)
    a = pause(admin, holder="trainer-a", lease_seconds=60)
    b = pause(admin, holder="trainer-b", lease_seconds=120)
    assert a["holders"] == 1 and b["holders"] == 2
    st = status(admin)
    assert st["lease_expires_soonest"] == pytest.approx(a["lease_expires_at"])
    assert st["lease_expires_latest"] == pytest.approx(b["lease_expires_at"])
    resumed = admin.post("/admin/resume", json={"holder": "trainer-b", "policy_version": "v2"})
    assert resumed.status_code == 200
    assert resumed.get_json()["paused"] is True and resumed.get_json()["holders"] == 1
    assert ProxyControlStore(r).is_paused()
    again = admin.post("/admin/resume", json={"holder": "trainer-b"})  # already released: holds nothing
    assert again.status_code == 409 and again.get_json()["error"]["code"] == "pause_not_held"
    done = admin.post("/admin/resume", json={"holder": "trainer-a"}).get_json()
    assert done["paused"] is False and done["holders"] == 0 and done["policy_version"] == "v2"


def test_a_resume_naming_no_holder_ends_only_a_lone_pause_unless_forced(proxy_app):
    admin = admin_client(proxy_app)
    pause(admin, holder="trainer-a")
    pause(admin, holder="trainer-b")
    refused = admin.post("/admin/resume", json={"policy_version": "v9"})
    assert refused.status_code == 409
    err = refused.get_json()["error"]
    assert err["code"] == "pause_holder_ambiguous" and "2 holders" in err["message"]
    assert status(admin)["paused"] is True and status(admin)["policy_version"] != "v9"  # nothing written
    forced = admin.post("/admin/resume", json={"policy_version": "v9", "force": True})
    assert forced.status_code == 200
    assert forced.get_json()["paused"] is False and forced.get_json()["holders"] == 0
    assert forced.get_json()["policy_version"] == "v9"
    pause(admin)  # one holder: a resume without one (an old client) is that one's
    assert admin.post("/admin/resume").get_json()["paused"] is False


def test_a_new_version_is_refused_while_a_call_of_the_old_one_is_in_flight(proxy_app, r):
    """The drain timed out: loading weights and stamping the new version would leave the call that
    spans the swap under the old stamp, unmarked."""
    store = ProxyControlStore(r)
    store.enter("call-spanning-the-swap", time.time() + 60)  # admitted before the pause, still sampling
    admin = admin_client(proxy_app)
    held = pause(admin, holder="trainer-a")
    assert held["drained"] is False and held["inflight"] == 1
    refused = admin.post("/admin/resume", json={"holder": "trainer-a", "policy_version": "v2"})
    assert refused.status_code == 409
    err = refused.get_json()["error"]
    assert err["code"] == "calls_in_flight" and "1 call(s)" in err["message"]
    assert status(admin)["paused"] is True and status(admin)["policy_version"] is None  # nothing written
    forced = admin.post("/admin/resume", json={"holder": "trainer-a", "policy_version": "v2", "force": True})
    assert forced.status_code == 200 and forced.get_json()["policy_version"] == "v2"
    assert forced.get_json()["paused"] is False


def test_releasing_a_hold_without_a_new_version_needs_no_drain(proxy_app, r):
    """What a trainer does when its drain timed out: give the hold back, load nothing."""
    ProxyControlStore(r).enter("call-still-running", time.time() + 60)
    admin = admin_client(proxy_app)
    held = pause(admin)
    resumed = admin.post("/admin/resume", json={"holder": held["holder"]})
    assert resumed.status_code == 200 and resumed.get_json()["paused"] is False


@pytest.mark.parametrize("body", ["[1]", "1", '"v2"', "null", "{not json"])
def test_a_resume_body_that_is_not_a_json_object_is_refused(proxy_app, body):
    admin = admin_client(proxy_app)
    pause(admin)
    resp = admin.post("/admin/resume", data=body, content_type="application/json")
    assert resp.status_code == 400 and resp.get_json()["error"]["type"] == "invalid_request_error"
    assert status(admin)["paused"] is True


@pytest.mark.parametrize("lease", ["0", "-1", "nan", "inf", "86401", "soon"])
def test_pause_needs_a_positive_bounded_lease(proxy_app, lease):
    admin = admin_client(proxy_app)
    resp = admin.post("/admin/pause", query_string={"timeout_seconds": 0, "lease_seconds": lease})
    assert resp.status_code == 400 and resp.get_json()["error"]["param"] == "lease_seconds"
    assert status(admin)["paused"] is False


def test_without_an_admin_token_the_control_routes_answer_nobody(r, redis_url, tmp_path):
    open_proxy = create_app(proxy_settings(redis_url, tmp_path), transport=WSGITransport(fake_upstream.app))
    client = open_proxy.test_client()
    for method, path in (("POST", "/admin/pause"), ("POST", "/admin/resume"), ("GET", "/admin/status")):
        resp = client.open(path, method=method, json={"policy_version": "evil", "force": True},
                           headers={"x-polar-admin-token": "anything"})
        assert resp.status_code == 403, (path, resp.get_json())
        err = resp.get_json()["error"]
        assert err["type"] == "permission_error" and "POLAR_ADMIN_TOKEN" in err["message"]
    assert not r.exists(keys.PROXY_PAUSED, keys.PROXY_POLICY_VERSION)


def test_a_call_held_by_the_pause_resumes_under_the_version_its_holder_set(proxy_app, redis_url):
    admin = admin_client(proxy_app)
    held = pause(admin, holder="trainer-a")
    key = running_session(redis_url)
    c = sdk_clients(proxy_app, key)["openai"]
    waiting = threading.Thread(target=lambda: c.chat.completions.create(model="fake", messages=MSG))
    waiting.start()
    wait_for(lambda: status(admin)["inflight"] == 0 and waiting.is_alive(), timeout=5)
    resumed = admin.post("/admin/resume", json={"holder": held["holder"], "policy_version": "v7"})
    assert resumed.status_code == 200, resumed.get_json()
    waiting.join(timeout=10)
    assert [rec["policy_version"] for rec in records(redis_url, key)[0]] == ["v7"]


def test_the_apis_status_and_polar_status_show_who_holds_the_pause(proxy_app, redis_url, tmp_path, monkeypatch):
    import io

    from rich.console import Console

    from infra.cli import render
    from pipeline.api.app import create_app as create_api
    from pipeline.settings import Settings

    api = create_api(Settings(home=tmp_path, redis_url=redis_url)).test_client()
    assert api.get("/rollout/status?workers=0").get_json()["proxy"]["paused"] is False
    held = pause(admin_client(proxy_app), holder="trainer-a", lease_seconds=60)
    proxy = api.get("/rollout/status?workers=0").get_json()["proxy"]
    assert proxy["paused"] is True and proxy["holders"] == 1
    assert proxy["lease_expires_soonest"] == proxy["lease_expires_latest"] == pytest.approx(held["lease_expires_at"])
    out = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=out, width=200))
    render.print_pipeline(api.get("/rollout/status?workers=0").get_json())
    assert "PAUSED for weight sync: 1 holder(s)" in out.getvalue()


def test_a_call_parked_past_its_sessions_end_never_reaches_the_engine(proxy_app, redis_url):
    """A session whose budget ran out while its call waited out a pause: after the resume the
    call is refused as the ended session's, not sent to the engine -- and its number has its
    record, the refusal (without one POSTRUN counted it as a call the service lost)."""
    import openai

    from pipeline.status import SessionStatus
    from pipeline.stores.sessions import SessionStore
    from tests.support import sid_of

    admin = admin_client(proxy_app)
    held = pause(admin)
    key = running_session(redis_url)
    c = sdk_clients(proxy_app, key)["openai"]
    outcome: list = []

    def call():
        try:
            c.with_options(max_retries=0).chat.completions.create(model="fake", messages=MSG)
            outcome.append("answered")
        except openai.APIStatusError as exc:
            outcome.append(exc.status_code)

    waiting = threading.Thread(target=call)
    waiting.start()
    time.sleep(0.3)
    SessionStore(redis.Redis.from_url(redis_url)).transition(sid_of(key), SessionStatus.POSTRUN)  # its budget ran out
    assert admin.post("/admin/resume", json={"holder": held["holder"]}).status_code == 200
    waiting.join(timeout=10)
    assert outcome == [403]
    done, errors = records(redis_url, key)
    assert not done  # nothing sampled
    assert [(e["seq"], e["status_code"], e["error_type"]) for e in errors] == [(1, 403, "SessionNotActive")]


def test_an_integer_version_only_moves_forward_unless_forced(proxy_app):
    """Going back (7 -> 1) made every later session's lag negative: nothing was ever stale."""
    admin = admin_client(proxy_app)
    held = pause(admin)
    assert admin.post("/admin/resume", json={"holder": held["holder"], "policy_version": "7"}).status_code == 200
    held = pause(admin)
    back = admin.post("/admin/resume", json={"holder": held["holder"], "policy_version": "1"})
    assert back.status_code == 409 and "older than the current 7" in back.get_json()["error"]["message"]
    assert status(admin)["paused"] is True and status(admin)["policy_version"] == "7"  # nothing written
    assert admin.post("/admin/resume", json={"holder": held["holder"], "policy_version": "8"}).status_code == 200
    held = pause(admin)
    forced = admin.post("/admin/resume", json={"holder": held["holder"], "policy_version": "1", "force": True})
    assert forced.status_code == 200 and status(admin)["policy_version"] == "1"
    held = pause(admin)  # names that are not integers are not compared
    assert admin.post("/admin/resume", json={"holder": held["holder"], "policy_version": "ckpt-a"}).status_code == 200


@pytest.mark.parametrize("path, body, done", [
    ("/v1/chat/completions", {"messages": MSG}, b"data: [DONE]"),
    # Codex's: the Responses API is parsed only once admitted (previous_response_id reads the
    # session's stored responses), and its streams were not parked until its body was read for it.
    ("/v1/responses", {"input": "hi"}, b"response.completed")], ids=["chat", "responses"])
def test_a_stream_that_finds_inference_paused_is_opened_and_kept_alive_while_it_waits(proxy_app, redis_url, path,
                                                                                      body, done):
    """A streamed call parked by a pause got no byte until the resume: a harness with a 20 s read
    timeout gave up on a 45 s weight update and its session ended ERROR (probe). It is now opened
    and sent keepalives while parked, then answered."""
    admin = admin_client(proxy_app)
    held = pause(admin)
    key = running_session(redis_url)
    got: dict = {}
    first_chunk = threading.Event()

    def stream():
        resp = proxy_app.test_client().post(f"/s/{key}{path}", json={"model": "fake", **body, "stream": True},
                                            headers={"Authorization": f"Bearer {key}"}, buffered=False)
        got["status"] = resp.status_code
        chunks = iter(resp.response)
        got["first"] = next(chunks)
        first_chunk.set()
        got["rest"] = b"".join(chunks)

    reader = threading.Thread(target=stream, daemon=True)
    reader.start()
    assert first_chunk.wait(timeout=5), "no byte while the call was parked"
    assert got["status"] == 200 and status(admin)["paused"] and records(redis_url, key)[0] == []
    time.sleep(1.0)  # a few keepalive intervals (0.3 s here) while still parked
    assert admin.post("/admin/resume", json={"holder": held["holder"], "policy_version": "9"}).status_code == 200
    reader.join(timeout=10)
    assert done in got["rest"] and got["rest"].count(b": keepalive") >= 2
    [rec] = records(redis_url, key)[0]
    assert rec["policy_version"] == "9"  # stamped with the version it was sampled under


def test_parked_calls_read_the_pause_once_a_poll_for_all_of_them(proxy_app, redis_url, r):
    """Each parked call polled the flag itself: 8 parked calls took Redis from 7 to 198 commands a
    second, a thousand would make 20k (probe). A process now reads it once a poll interval."""
    admin = admin_client(proxy_app)
    held = pause(admin)
    key = running_session(redis_url)
    c = sdk_clients(proxy_app, key)["openai"]
    parked = [threading.Thread(target=lambda: c.chat.completions.create(model="fake", messages=MSG))
              for _ in range(8)]
    for t in parked:
        t.start()
    time.sleep(0.5)  # all parked

    def reads() -> int:
        return int(r.info("commandstats").get("cmdstat_exists", {}).get("calls", 0))

    before = reads()
    time.sleep(1.0)
    per_second = reads() - before
    assert admin.post("/admin/resume", json={"holder": held["holder"]}).status_code == 200
    for t in parked:
        t.join(timeout=10)
    assert len(records(redis_url, key)[0]) == 8
    assert per_second <= 30, per_second  # one reader at a 0.05 s poll: about 20, not 8 x 20


def test_two_resumes_racing_cannot_move_the_version_back(proxy_app):
    """The order check lives in the release script: two holders resuming at once with 5 and 3
    (current 2) cannot both pass it and leave 3 written last. "1_0" is not read as 10."""
    admin = admin_client(proxy_app)
    held = pause(admin)
    assert admin.post("/admin/resume", json={"holder": held["holder"], "policy_version": "2"}).status_code == 200
    a, b = pause(admin), pause(admin)
    answers: dict = {}
    go = threading.Barrier(2)

    def resume(who, version):
        go.wait()
        answers[version] = admin_client(proxy_app).post(
            "/admin/resume", json={"holder": who["holder"], "policy_version": version}).status_code

    threads = [threading.Thread(target=resume, args=(a, "5")), threading.Thread(target=resume, args=(b, "3"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert status(admin)["policy_version"] == "5"  # whichever ran first, 5 is where it ends
    assert answers["5"] == 200 and answers["3"] in (200, 409)
    for version in ("20", "1_0"):  # "1_0" is no integer (Python's int() reads it as 10): not compared
        held = pause(admin)
        assert admin.post("/admin/resume", json={"holder": held["holder"], "policy_version": version}).status_code == 200
    assert status(admin)["policy_version"] == "1_0"


@pytest.mark.parametrize("params", [{"policy_version": "v7\n"}, {"holder": "trainer\n"}])
def test_a_trailing_newline_is_not_a_printable_version_or_holder(proxy_app, params):
    """``^[!-~]{1,128}$`` let a final newline through (``$`` matches before it): a version
    "v7\\n" was stamped on every later record. Now it is a 400 naming the parameter."""
    resp = admin_client(proxy_app).post("/admin/resume", json=params)
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert next(iter(params)) in resp.get_data(as_text=True)


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_waiting_for_an_unreachable_engine_leaves_a_pauses_drain_and_samples_under_the_new_version(
        r, redis_url, tmp_path, stream):
    """The engine is down (restarting, perhaps for this very weight sync) while a call waits for it
    (POLAR_PROXY_ENGINE_WAIT_SECONDS): nothing is sampled yet, so a pause taken meanwhile drains
    at once instead of waiting out the call's engine wait; the engine back before the resume
    still samples nothing; after it, the call is sampled and stamped with the new version."""
    engine = "http://restarting.test"
    transport = WSGITransport(apps={engine: None})
    app = create_app(proxy_settings(redis_url, tmp_path, admin_token=ADMIN_TOKEN, upstream_url=engine,
                                    upstream_timeout_seconds=20, proxy_engine_wait_seconds=20), transport)
    admin = admin_client(app)
    key = running_session(redis_url)
    got: dict = {}

    def agent() -> None:
        resp = app.test_client().post(f"/s/{key}/v1/chat/completions", json={
            "model": "fake", "messages": MSG, "stream": stream}, headers={"Authorization": f"Bearer {key}"})
        got["status"], got["body"] = resp.status_code, resp.get_data()

    caller = threading.Thread(target=agent, daemon=True)
    caller.start()
    wait_for(lambda: len(transport.calls) >= 2, timeout=10)  # refused, waited, refused again: it is waiting
    assert status(admin)["inflight"] == 1 and caller.is_alive()
    started = time.monotonic()
    held = admin.post("/admin/pause", query_string={"timeout_seconds": 10, "holder": "trainer"}).get_json()
    assert held["drained"] and held["inflight"] == 0, held
    assert time.monotonic() - started < 5  # (it stepped out at its next wait: at most 2 s of back-off)
    tries = len(transport.calls)
    transport.apps[engine] = fake_upstream.app  # the engine is back, inference still paused
    time.sleep(2.5)  # longer than the call's back-off between tries (2 s at most)
    assert caller.is_alive() and len(transport.calls) == tries and records(redis_url, key) == ([], [])
    resumed = admin.post("/admin/resume", json={"holder": "trainer", "policy_version": "v2"})
    assert resumed.status_code == 200, resumed.get_json()
    caller.join(timeout=15)
    assert got["status"] == 200 and (b"data: [DONE]" in got["body"]) is stream, got
    done, errors = records(redis_url, key)
    assert [rec["policy_version"] for rec in done] == ["v2"] and not errors


def test_redis_away_while_a_call_waits_for_the_engine_does_not_fail_the_call(tmp_path):
    """Between its engine waits a call reads the pause flag; Redis restarting meanwhile holds
    that read until Redis is back (it is not a 503), and the call goes on waiting for the engine,
    then is sampled and recorded once."""
    from infra.embedded_redis import EmbeddedRedis

    engine = "http://restarting.test"
    transport = WSGITransport(apps={engine: None})
    server = EmbeddedRedis(data_dir=tmp_path / "redis").start()
    try:
        app = create_app(proxy_settings(server.url, tmp_path / "home", upstream_url=engine,
                                        upstream_timeout_seconds=20, proxy_engine_wait_seconds=20), transport)
        key = running_session(server.url)
        got: dict = {}

        def agent() -> None:
            resp = app.test_client().post(f"/s/{key}/v1/chat/completions", json={"model": "fake", "messages": MSG},
                                          headers={"Authorization": f"Bearer {key}"})
            got["status"], got["body"] = resp.status_code, resp.get_json()

        caller = threading.Thread(target=agent, daemon=True)
        caller.start()
        wait_for(lambda: len(transport.calls) >= 2, timeout=10)  # it waits for the engine
        server.stop()  # (its append-only file keeps the session and the call's lease)
        time.sleep(2.5)  # longer than the call's back-off between tries: it reads the flag meanwhile
        assert caller.is_alive()
        server.start()
        transport.apps[engine] = fake_upstream.app
        caller.join(timeout=20)
        assert got["status"] == 200, got
        done, errors = records(server.url, key)
        assert len(done) == 1 and not errors
    finally:
        server.stop()


def test_a_responses_call_whose_body_says_stream_but_is_refused_gets_a_plain_error(proxy_app, redis_url):
    """Parked for its stream, a Responses call its parse refuses never opens one: the plain 400."""
    admin = admin_client(proxy_app)
    held = pause(admin)
    key = running_session(redis_url)
    resp = proxy_app.test_client().post(f"/s/{key}/v1/responses", json={
        "model": "fake", "input": "hi", "stream": True, "include": ["no.such.include"]},
        headers={"Authorization": f"Bearer {key}"})
    assert resp.status_code == 400 and resp.get_json()["error"]["param"] == "include"
    admin.post("/admin/resume", json={"holder": held["holder"]})
    done, errors = records(redis_url, key)
    assert done == [] and len(errors) == 1
