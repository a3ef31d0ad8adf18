"""The rollout API in-process (Flask test client / the trainer client over a WSGI transport):
validation, conflicts, cancellation before any worker ran, the pipeline status. Stage messages
go to the real Celery queues in Redis; no worker consumes them here."""

from __future__ import annotations

import io

import httpx
import orjson
import pytest

from pipeline.api.app import create_app
from pipeline.client import RolloutClient, RolloutError
from pipeline.settings import Settings
from pipeline.status import Outcome, SessionStatus, Stage
from pipeline.stores.queues import queue_depths
from tests.support import MSG

TASK = {"instruction": "write hello.txt", "num_samples": 3, "agent": {"custom_shell": "true"},
        "metadata": {"group_id": "g"}}


@pytest.fixture
def api(r, redis_url, tmp_path):
    return create_app(Settings(home=tmp_path, redis_url=redis_url))


@pytest.fixture
def client(api, redis_url):
    return RolloutClient("http://localhost", redis_url=redis_url, transport=httpx.WSGITransport(app=api))


def queued(r, stage: Stage) -> int:
    return queue_depths(r, [stage.queue])[stage.queue]


def test_submit_registers_every_session_and_queues_init(client, stores, r):
    task_id = client.submit({**TASK, "task_id": "t-submit"})
    status = client.status(task_id)
    assert task_id == "t-submit" and status.total_sessions == 3 and status.counts == {"REGISTERED": 3}
    assert sorted(s.sample_index for s in status.sessions) == [0, 1, 2]
    assert queued(r, Stage.INIT) == 3 and status.metadata == {"group_id": "g"}
    assert all(stores.sessions.status(s.session_id) == SessionStatus.REGISTERED for s in status.sessions)


def test_invalid_task_request_names_each_field_and_creates_nothing(client, stores, r):
    bad = {**TASK, "task_id": "t-bad", "runtime": {"backend": "dokcer"}, "timout_seconds": 3}
    with pytest.raises(RolloutError) as info:
        client.submit(bad)
    assert info.value.status == 400
    assert {"runtime.backend", "timout_seconds"} <= {f["field"] for f in info.value.body["error"]["fields"]}
    assert not stores.tasks.exists("t-bad") and queued(r, Stage.INIT) == 0


@pytest.mark.parametrize("raw, kind", [(b"{not json", "malformed_json"), (b'{"instruction": NaN}', "malformed_json"),
                                       (b"[1, 2]", "invalid_request")])
def test_malformed_bodies_are_400_in_the_api_format(api, raw, kind):
    resp = api.test_client().post("/rollout/task/submit", data=raw, content_type="application/json")
    assert resp.status_code == 400 and resp.get_json()["error"]["type"] == kind


def post_submit(api, raw: bytes, chunked: bool):
    """As gunicorn hands a body sent without Content-Length: wsgi.input_terminated, no length."""
    sent = ({"input_stream": io.BytesIO(raw), "headers": {"Transfer-Encoding": "chunked"},
             "environ_overrides": {"wsgi.input_terminated": True}} if chunked else {"data": raw})
    return api.test_client().post("/rollout/task/submit", content_type="application/json", **sent)


@pytest.mark.parametrize("chunked", [False, True])
def test_an_oversized_body_is_413_also_when_sent_chunked(redis_url, tmp_path, stores, chunked):
    # werkzeug cuts a body without Content-Length at the limit and says nothing: not parsed as cut
    api = create_app(Settings(home=tmp_path, redis_url=redis_url, max_submit_bytes=1000))
    resp = post_submit(api, orjson.dumps({**TASK, "task_id": "t-big", "metadata": {"pad": "x" * 1200}}), chunked)
    assert resp.status_code == 413 and resp.get_json()["error"]["type"] == "request_too_large"
    assert not stores.tasks.exists("t-big")
    assert post_submit(api, orjson.dumps({**TASK, "task_id": "t-small"}), chunked).status_code == 200


def test_duplicate_task_id_is_a_conflict(client):
    client.submit({**TASK, "task_id": "t-dup"})
    with pytest.raises(RolloutError) as info:
        client.submit({**TASK, "task_id": "t-dup"})
    assert info.value.status == 409


def test_unknown_task_is_404(client):
    for call in (lambda: client.status("no-such-task"), lambda: client.cancel("no-such-task")):
        with pytest.raises(RolloutError) as info:
            call()
        assert info.value.status == 404 and info.value.body["error"]["type"] == "not_found"


def test_cancel_before_any_worker_sends_every_session_to_postrun(client, stores, r):
    task_id = client.submit({**TASK, "task_id": "t-cancel"})
    out = client.cancel(task_id)
    assert out["moved_to_postrun"] == 3 and out["flagged"] == 0
    assert queued(r, Stage.POSTRUN) == 3
    for s in client.status(task_id).sessions:
        state = stores.sessions.get(s.session_id)
        assert state.status == SessionStatus.POSTRUN and state.outcome == Outcome.CANCELLED
    assert client.status(task_id).status.value == "cancelling" and out["status"] == "cancelling"
    repeated = client.cancel(task_id)  # nothing left to move or flag: not counted again
    assert (repeated["moved_to_postrun"], repeated["flagged"]) == (0, 0) and queued(r, Stage.POSTRUN) == 3
    stores.tasks.finish(task_id)  # what the last session's callback does
    again = client.cancel(task_id)  # a finished task is not "cancelling" again: its state is said
    assert again["status"] == "cancelled"


def test_a_task_is_running_once_a_session_has_started(client, stores):
    task_id = client.submit({**TASK, "task_id": "t-running"})
    assert client.status(task_id).status.value == "pending"
    first = client.status(task_id).sessions[0].session_id
    stores.sessions.transition(first, SessionStatus.INITIALIZING)
    status = client.status(task_id)
    assert status.status.value == "running" and status.counts == {"REGISTERED": 2, "INITIALIZING": 1}


def test_pipeline_status_lists_every_stage_queue(client, api):
    client.submit({**TASK, "task_id": "t-status"})
    data = api.test_client().get("/rollout/status?workers=0").get_json()
    assert set(data["queues"]) == {s.queue for s in Stage} and data["queues"]["init"] == 3
    assert data["ready"]["capacity"] > 0 and data["tasks"] == {"pending": 1}
    assert api.test_client().get("/health").get_json() == {"status": "ok"}


def test_proxy_refuses_an_unknown_key_in_the_openai_format(proxy_app):
    client = proxy_app.test_client()
    for path, headers in (("/s/sk-polar-nope/v1/chat/completions", {}),
                          ("/v1/chat/completions", {"Authorization": "Bearer sk-polar-nope"}),
                          ("/v1/chat/completions", {})):
        resp = client.post(path, json={"model": "m", "messages": MSG}, headers=headers)
        body = resp.get_json()["error"]
        assert resp.status_code == 404 and body["code"] == "session_not_found" and "key" in body["message"]


@pytest.mark.parametrize("field, payload", [
    ("evaluator.strategy", {"evaluator": {"strategy": "subprocess:Popen", "config": {"args": "touch x", "shell": True}}}),
    ("builder.strategy", {"builder": {"strategy": "os:system"}}),
    ("runtime.backend", {"runtime": {"backend": "workers.runtimes.memory:MemoryRuntime"}}),
])
def test_a_plugin_outside_the_allow_list_is_refused(client, stores, field, payload):
    with pytest.raises(RolloutError) as info:
        client.submit({**TASK, "task_id": "t-plugin", **payload})
    assert info.value.status == 400
    assert [f["field"] for f in info.value.body["error"]["fields"]] == [field]
    assert not stores.tasks.exists("t-plugin")


def test_an_allowed_plugin_module_is_accepted(r, redis_url, tmp_path):
    api = create_app(Settings(home=tmp_path, redis_url=redis_url, plugin_modules="workers.runtimes.memory"))
    client = RolloutClient("http://localhost", transport=httpx.WSGITransport(app=api))
    assert client.submit({**TASK, "runtime": {"backend": "workers.runtimes.memory:MemoryRuntime"}})


def test_a_callback_at_the_services_own_endpoints_is_refused_at_submit(r, redis_url, tmp_path):
    settings = Settings(home=tmp_path, redis_url=redis_url, proxy_url="http://127.0.0.1:8091")
    client = RolloutClient("http://localhost", transport=httpx.WSGITransport(app=create_app(settings)))
    with pytest.raises(RolloutError) as info:
        client.submit({**TASK, "callback_url": "http://localhost:8091/admin/pause"})
    assert [f["field"] for f in info.value.body["error"]["fields"]] == ["callback_url"]


def test_the_api_needs_its_token(r, redis_url, tmp_path):
    api = create_app(Settings(home=tmp_path, redis_url=redis_url, api_token="tok-1"))
    anonymous = RolloutClient("http://localhost", transport=httpx.WSGITransport(app=api))
    wrong = RolloutClient("http://localhost", api_token="tok-2", transport=httpx.WSGITransport(app=api))
    right = RolloutClient("http://localhost", api_token="tok-1", transport=httpx.WSGITransport(app=api))
    for client in (anonymous, wrong):
        for call in (lambda c: c.submit(TASK), lambda c: c.status("x"), lambda c: c.pipeline_status(),
                     lambda c: c.cancel("x")):
            with pytest.raises(RolloutError) as info:
                call(client)
            assert info.value.status == 401
    assert right.submit({**TASK, "task_id": "t-auth"}) == "t-auth"
    assert api.test_client().get("/health").status_code == 200  # open: it reveals nothing


@pytest.mark.parametrize("raw", [b'{"instruction": "\\ud800", "agent": {"custom_shell": "true"}}',
                                 b"[" * 100 + b"]" * 100,
                                 b'{"instruction": "x", "agent": {"custom_shell": "true"}, "metadata": ' + b'{"a":' * 70
                                 + b"1" + b"}" * 70 + b"}"])
def test_invalid_unicode_and_deep_nesting_are_400(api, stores, raw):
    resp = api.test_client().post("/rollout/task/submit", data=raw, content_type="application/json")
    assert resp.status_code == 400 and resp.get_json()["error"]["type"] in ("malformed_json", "invalid_request")
    assert stores.tasks.recent() == []


def test_instruction_and_task_size_limits(r, redis_url, tmp_path):
    api = create_app(Settings(home=tmp_path, redis_url=redis_url, max_instruction_bytes=1000,
                              max_task_bytes=8000))
    client = RolloutClient("http://localhost", transport=httpx.WSGITransport(app=api))
    for task, field in (({**TASK, "instruction": "x" * 1001, "num_samples": 1}, "instruction"),
                        ({**TASK, "instruction": "x" * 1000, "num_samples": 6}, "num_samples")):
        with pytest.raises(RolloutError) as info:
            client.submit(task)
        assert [f["field"] for f in info.value.body["error"]["fields"]] == [field]
    assert client.submit({**TASK, "instruction": "x" * 1000, "num_samples": 5})
    # the whole spec counts, not just the instruction: a big metadata (or env, command) is copied too
    with pytest.raises(RolloutError) as info:
        client.submit({**TASK, "metadata": {"blob": "y" * 3000}, "num_samples": 3})
    assert "largest field: metadata" in info.value.body["error"]["fields"][0]["message"]
    assert client.submit({**TASK, "metadata": {"blob": "y" * 3000}, "num_samples": 2})


def test_redis_down_is_503_and_health_says_so(tmp_path):
    from infra.embedded_redis import EmbeddedRedis

    with EmbeddedRedis() as server:
        api = create_app(Settings(home=tmp_path, redis_url=server.url))
        assert api.test_client().get("/health").status_code == 200
    health = api.test_client().get("/health")
    assert health.status_code == 503 and health.get_json()["status"] == "unavailable"


def test_the_operator_can_refuse_runtime_backends_the_default_one_included(r, redis_url, tmp_path):
    """Any API token holder could pick `local` (code on the worker host as its user); an operator
    serving others' tasks allows only sandboxes."""
    api = create_app(Settings(home=tmp_path, redis_url=redis_url, allowed_runtime_backends="docker, bwrap"))
    client = RolloutClient("http://localhost", transport=httpx.WSGITransport(app=api))
    for runtime in ({"backend": "local"}, {}):  # named, or the default (local)
        with pytest.raises(RolloutError) as info:
            client.submit({**TASK, "runtime": runtime})
        (problem,) = info.value.body["error"]["fields"]
        assert problem["field"] == "runtime.backend" and "POLAR_ALLOWED_RUNTIME_BACKENDS" in problem["message"]
        assert "docker, bwrap" in problem["message"]
    assert client.submit({**TASK, "runtime": {"backend": "bwrap"}})


def test_the_operator_chooses_the_networks_sessions_may_get(r, redis_url, tmp_path):
    """A task named any network: the worker's own (its loopback, where an engine without an API
    key answers unrecorded) by default, or `container:<x>`, another session's. By default the
    latter is refused; an operator lists what sessions may get ("none" always)."""
    image = {"image": "polar-test:latest"}
    client = RolloutClient("http://localhost", transport=httpx.WSGITransport(
        app=create_app(Settings(home=tmp_path, redis_url=redis_url))))
    for mode in ("container:polar-sess-x", "Container:polar-sess-x", " container:x", "ns:/proc/6000/ns/net",
                 "NS:/proc/1/ns/net", "bridge "):
        with pytest.raises(RolloutError) as info:
            client.submit({**TASK, "runtime": {"backend": "docker", **image, "network": mode}})
        (problem,) = info.value.body["error"]["fields"]
        assert problem["field"] == "runtime.network" and "another session" in problem["message"], mode
    assert client.submit({**TASK, "task_id": "t-host", "runtime": {"backend": "docker", **image}})  # host: unset allows it

    strict = RolloutClient("http://localhost", transport=httpx.WSGITransport(app=create_app(Settings(
        home=tmp_path, redis_url=redis_url, allowed_runtime_networks="bridge"))))
    for runtime, field in (({"backend": "docker", **image}, "runtime.allow_internet"),  # the default: host
                           ({"backend": "bwrap"}, "runtime.allow_internet"),
                           ({"backend": "docker", **image, "network": "other"}, "runtime.network"),
                           ({"backend": "local"}, "runtime.allow_internet")):
        with pytest.raises(RolloutError) as info:
            strict.submit({**TASK, "runtime": runtime})
        (problem,) = info.value.body["error"]["fields"]
        assert problem["field"] == field and "POLAR_ALLOWED_RUNTIME_NETWORKS" in problem["message"], problem
    for i, runtime in enumerate(({"backend": "docker", **image, "network": "bridge"},
                                 {"backend": "docker", **image, "allow_internet": False},
                                 {"backend": "bwrap", "network": "none"})):
        assert strict.submit({**TASK, "task_id": f"t-net-{i}", "runtime": runtime})


def test_uploads_never_copy_the_services_own_state(r, redis_url, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "tokens.json").write_text('{"api_token": "secret"}')
    (tmp_path / "agent.py").write_text("print('hi')")
    (tmp_path / "link.json").symlink_to(home / "tokens.json")
    (tmp_path / ".env").write_text("POLAR_REDIS_URL=redis://secret@host\n")
    monkeypatch.chdir(tmp_path)  # the settings' .env is the working directory's
    # the allowed folder holds the home and the .env: they stay out of reach anyway
    api = create_app(Settings(home=home, redis_url=redis_url, upload_roots=str(tmp_path)))
    client = RolloutClient("http://localhost", transport=httpx.WSGITransport(app=api))

    def upload(src: str) -> dict:
        return {**TASK, "runtime": {"prepare": [{"type": "upload_file", "src": src, "dst": "/polar/session/x"}]}}

    assert client.submit(upload(str(tmp_path / "agent.py")))
    # tmp_path: a folder holding the home and the .env (a `polar up` started in ~ with ~/.polar)
    for src in (home / "tokens.json", tmp_path / "link.json", tmp_path / ".env", home, tmp_path):
        with pytest.raises(RolloutError) as info:
            client.submit(upload(str(src)))
        (problem,) = info.value.body["error"]["fields"]
        assert problem["field"] == "runtime.prepare.0.src" and "own state" in problem["message"], problem
        assert "secret" not in str(info.value.body)
    with pytest.raises(RolloutError) as info:  # a NUL byte is the client's 400, not a 500
        client.submit(upload(f"{tmp_path}/agent.py\x00x"))
    assert info.value.status == 400 and info.value.body["error"]["fields"][0]["field"] == "runtime.prepare.0.src"


@pytest.mark.parametrize("task_id", ["victim?x", "victim#x", "%2e%2e", "a\\b", ".", ".."])
def test_task_ids_that_would_read_as_another_url_are_refused(client, task_id):
    with pytest.raises(RolloutError) as info:
        client.submit({**TASK, "task_id": task_id})
    assert info.value.status == 400 and info.value.body["error"]["fields"][0]["field"] == "task_id"


@pytest.mark.parametrize("task_id", ["evil\u202etxt.sh", "a\u200bb", "t\u2066x\u2069", "x\ue000", "y\U000e0041"])
def test_task_ids_that_would_read_as_another_id_are_refused(client, stores, task_id):
    """A right-to-left override (U+202E) made "evil<RLO>txt.sh" show as "evilhs.txt" in the CLI's
    tables and the viewer; zero-width and tag characters make two ids look alike. Found by a probe."""
    with pytest.raises(RolloutError) as info:
        client.submit({**TASK, "task_id": task_id})
    assert info.value.status == 400 and info.value.body["error"]["fields"][0]["field"] == "task_id"
    assert "U+" in info.value.body["error"]["fields"][0]["message"] and not stores.tasks.exists(task_id)


@pytest.mark.parametrize("task_id", ["café-ünïcode-任务-1", "emoji-🚀", "a.b_c-d:e"])
def test_task_ids_in_any_script_still_pass(client, task_id):
    assert client.submit({**TASK, "task_id": task_id}) == task_id


def test_the_client_sends_an_id_as_one_path_segment(client):
    client.submit({**TASK, "task_id": "victim"})
    with pytest.raises(RolloutError) as info:  # not victim's status: an id of its own, unknown
        client.status("victim?x")
    assert info.value.status == 404
    with pytest.raises(RolloutError):
        client.cancel("victim?x")
    assert client.status("victim").cancelled is False


@pytest.mark.parametrize("change, field", [
    ({"agent": {"custom_shell": "true", "env": {"A=B": "1"}}}, "agent.env"),
    ({"agent": {"custom_shell": "true", "env": {"": "1"}}}, "agent.env"),
    ({"agent": {"custom_shell": "true", "env": {"A": "x\x00y"}}}, "agent.env"),
    ({"agent": {"custom_shell": {"command": "true", "env": {"1A": "x"}}}}, "agent.custom_shell.env"),
    ({"evaluator": {"env": {"B C": "x"}}}, "evaluator.env"),
    ({"instruction": "write\x00hello"}, "instruction"),
    ({"agent": {"custom_shell": "  "}}, "agent.custom_shell.command"),
    ({"timeout_seconds": True}, "timeout_seconds"),
    ({"runtime": {"prepare": [{"type": "exec", "command": "true", "src": "/etc/passwd"}]}}, "runtime.prepare.0"),
    # configs a grader or builder cannot honour: each used to fail in EVALUATE, after the agent ran
    ({"evaluator": {"strategy": "command", "config": {"command": "true", "timeout_seconds": -5}}}, "evaluator.config"),
    ({"evaluator": {"strategy": "command", "config": {"cmd": "true"}}}, "evaluator.config"),
    ({"evaluator": {"strategy": "test_on_output", "config": {
        "command": "pytest -rA", "expected_output_json": {"t::a": "PASSED"}, "exclude_patterns": "conftest.py"}}},
     "evaluator.config"),
    ({"evaluator": {"strategy": "test_on_output", "config": {"command": "pytest", "expected_output_json": "{no"}}},
     "evaluator.config"),
    ({"evaluator": {"strategy": "test_on_output", "config": {
        "command": "pytest", "expected_output_json": {"t::a": "PASSED"}, "base_commit": "HEAD; touch /tmp/x"}}},
     "evaluator.config"),
    ({"builder": {"strategy": "prefix_merging", "config": {"no_such_option": 1}}}, "builder.config"),
])
def test_what_would_fail_only_at_run_time_is_refused_at_submit(client, stores, change, field):
    with pytest.raises(RolloutError) as info:
        client.submit({**TASK, "task_id": "t-late", **change})
    assert info.value.status == 400
    fields = [f["field"] for f in info.value.body["error"]["fields"]]
    assert any(f == field or f.startswith(field + ".") for f in fields), fields
    assert not stores.tasks.exists("t-late")


@pytest.mark.parametrize("literal", [str(2**70), str(-(2**63) - 1), str(2**64)])
def test_an_integer_beyond_64_bits_is_refused_not_rounded(api, stores, literal):
    """orjson reads 2**70 as a float (1.18e21): a metadata id or seed came back changed. Now a 400
    naming it; within the range (and as a string, or in a string) it is kept exactly."""
    raw = b'{"task_id": "big", "instruction": "x", "agent": {"custom_shell": "true"}, "metadata": {"n": %s}}'
    resp = api.test_client().post("/rollout/task/submit", data=raw % literal.encode(), content_type="application/json")
    assert resp.status_code == 400 and literal in resp.get_json()["error"]["message"]
    assert not stores.tasks.exists("big")
    kept = b'{"task_id": "ok", "instruction": "x %s", "agent": {"custom_shell": "true"}, "metadata": {"n": %d, "s": "%s"}}'
    resp = api.test_client().post("/rollout/task/submit", data=kept % (literal.encode(), 2**64 - 1, literal.encode()),
                                  content_type="application/json")
    assert resp.status_code == 200, resp.get_json()
    status = api.test_client().get("/rollout/task/ok").get_json()
    assert status["metadata"] == {"n": 2**64 - 1, "s": literal}


def test_a_cancel_cut_off_half_way_leaves_a_ready_session_cancellable(client, stores, r, monkeypatch):
    """The canceller dies (or Redis goes away) in the middle of cancelling a READY session: before,
    the session was already out of READY but still READY -- nothing would ever move it on, and a
    second cancel could not either. Out of READY, the move and the outcome are now one step."""
    import redis as redis_lib

    task_id = client.submit({**TASK, "task_id": "t-cut", "num_samples": 1})
    [sid] = [s.session_id for s in client.status(task_id).sessions]
    for status in (SessionStatus.INITIALIZING, SessionStatus.READY):
        stores.sessions.transition(sid, status)
    stores.ready.push(sid, 60)
    real, calls = stores.sessions.transition, []

    def drops_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise redis_lib.ConnectionError("the canceller lost Redis half-way")
        return real(*args, **kwargs)

    monkeypatch.setattr(stores.sessions, "transition", drops_once)
    try:
        stores.tasks.cancel(task_id)
    except redis_lib.ConnectionError:
        pass
    stores.tasks.cancel(task_id)  # the user cancels again
    state = stores.sessions.get(sid)
    assert state.status == SessionStatus.POSTRUN and state.outcome == Outcome.CANCELLED
    assert stores.ready.snapshot()["depth"] == 0 and stores.ready.snapshot()["reserved"] == 0


@pytest.mark.parametrize("field, change", [
    ("task_id", {"task_id": "t-newline\n"}),
    ("agent", {"agent": {"custom_shell": "true", "env": {"FOO\n": "1"}}}),
    ("callback_url", {"task_id": "t-cb", "callback_url": "http://receiver.test/hook\n"}),
    ("agent", {"agent": {"harness": "claude_code", "settings": {"version": "2.1.3\n"}}}),
])
def test_a_trailing_newline_does_not_pass_a_fields_pattern(client, stores, r, field, change):
    """The patterns were anchored with ``$``, which also matches before a final newline: a task id
    "t-newline\\n" (documented as without whitespace) became a Redis key, a folder name and a URL
    segment, and an env name, a callback URL and a CLI version took a newline the same way."""
    with pytest.raises(RolloutError) as info:
        client.submit({**TASK, **change})
    assert info.value.status == 400, info.value.body
    assert any(f["field"].startswith(field) for f in info.value.body["error"]["fields"]), info.value.body
    assert not stores.tasks.exists("t-newline\n") and queued(r, Stage.INIT) == 0


@pytest.mark.parametrize("headers", [{"Origin": "http://evil.example", "Content-Type": "text/plain"},
                                     {"Origin": "null"},
                                     {"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"},
                                     {"Sec-Fetch-Site": "same-site", "Content-Type": "application/x-www-form-urlencoded"}])
def test_a_browsers_cross_site_submit_is_refused_even_without_a_token(api, stores, r, headers):
    """Submit parses its body as JSON whatever the Content-Type: another site's page could POST a
    task as a "simple" request (no CORS preflight) to an API on the user's machine, which needs no
    token on loopback; its custom_shell then ran. Found by posting a task as text/plain to a
    running stack's API: 200 and queued. Browsers say where a request comes from; refused now."""
    raw = orjson.dumps({**TASK, "task_id": "t-cross-site"})
    resp = api.test_client().post("/rollout/task/submit", data=raw, headers=headers)
    assert resp.status_code == 403 and resp.get_json()["error"]["type"] == "forbidden", resp.data
    assert not stores.tasks.exists("t-cross-site") and queued(r, Stage.INIT) == 0


def test_same_origin_and_non_browser_submits_still_pass(api):
    raw = orjson.dumps({**TASK, "task_id": "t-same-origin"})
    client = api.test_client()
    assert client.post("/rollout/task/submit", data=raw, content_type="application/json",
                       headers={"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}).status_code == 200
    assert client.post("/rollout/task/submit", data=orjson.dumps({**TASK, "task_id": "t-plain"}),
                       content_type="application/json", headers={"Origin": "http://localhost"}).status_code == 200


@pytest.mark.parametrize("raw", [b'{"instruction": "a", "instruction": "b", "agent": {"custom_shell": "true"}}',
                                 b'{"instruction": "a", "agent": {"custom_shell": "true", "custom_shell": "rm -rf x"},'
                                 b' "task_id": "t-dup"}'])
def test_a_key_sent_twice_is_a_400_not_the_last_value_kept(api, stores, r, raw):
    """{"task_id": "dup1", ..., "task_id": "dup2"} was accepted as dup2 (and one instruction of
    two silently dropped). Found by posting such a body to a running stack's API."""
    resp = api.test_client().post("/rollout/task/submit", data=raw, content_type="application/json")
    assert resp.status_code == 400 and "appears twice" in resp.get_json()["error"]["message"], resp.data
    assert not stores.tasks.exists("t-dup") and queued(r, Stage.INIT) == 0


def test_every_answer_says_nosniff(api):
    """Only the viewer's routes did: the rollout routes' JSON, which quotes submitted ids and
    agents' errors, went without it. Found by reading a running stack's response headers."""
    client = api.test_client()
    for resp in (client.get("/health"), client.get("/rollout/task/%3Cscript%3E"),
                 client.post("/rollout/task/submit", data=b"<html>", content_type="application/json")):
        assert resp.headers.get("X-Content-Type-Options") == "nosniff", resp.status_code


@pytest.mark.parametrize("host, status", [("evil.example:8090", 403), ("127.0.0.1.nip.io", 403), ("10.0.0.5:8090", 403),
                                          ("localhost:8090", 200), ("127.0.0.1:8090", 200), ("[::1]:8090", 200),
                                          ("127.0.0.2", 200)])
def test_without_a_token_only_a_loopback_host_name_is_answered(api, stores, r, host, status):
    """An API without POLAR_API_TOKEN (loopback only) answered whatever host a request named: a
    page whose own name was re-pointed at 127.0.0.1 (DNS rebinding) is same-origin to itself, so
    the cross-site check passes it, and it could read results and submit tasks. Found by a probe."""
    client = api.test_client()
    raw = orjson.dumps({**TASK, "task_id": "t-rebound"})
    resp = client.post("/rollout/task/submit", data=raw, content_type="application/json", headers={"Host": host})
    assert resp.status_code == status, resp.data
    assert stores.tasks.exists("t-rebound") is (status == 200)
    read = client.get("/rollout/status", headers={"Host": host})
    assert read.status_code == status
    if status == 403:
        assert "loopback host name" in read.get_json()["error"]["message"] and queued(r, Stage.INIT) == 0


def test_with_a_token_any_host_name_is_answered_once_authenticated(r, redis_url, tmp_path):
    api = create_app(Settings(home=tmp_path, redis_url=redis_url, api_token="tok-1"))
    client = api.test_client()
    assert client.get("/rollout/status", headers={"Host": "rollout.internal:8090"}).status_code == 401
    assert client.get("/rollout/status", headers={"Host": "rollout.internal:8090",
                                                  "Authorization": "Bearer tok-1"}).status_code == 200
