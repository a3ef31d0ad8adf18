"""The trajectory viewer's JSON routes, in-process: a session played through the proxy app by the
OpenAI SDK against the reference server (a real tiny model, scripted turns) over WSGI, its
records merged by the real prefix_merging builder and stored as POSTRUN/CALLBACK store them;
then the API's view model is checked against the records and the engine's own decoding. The
viewer asks the same engine app for token text (its transport is the only thing swapped)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from infra.refserver import ModelEngine, ScriptedPolicy
from infra.refserver import create_app as create_engine
from pipeline import builders, keys, results_dir
from pipeline.api.app import create_app
from pipeline.builders import BuildContext
from pipeline.schemas import SessionResult, SessionTiming
from pipeline.settings import Settings
from pipeline.status import SessionStatus
from proxy.app import create_app as create_proxy
from proxy.upstream import WSGITransport
from tests.inproc.conftest import UPSTREAM, proxy_settings, sdk_clients

POLICY = Path(__file__).resolve().parents[1] / "fixtures" / "viewer_policy.json"
TOKEN = "viewer-test-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a bash command.",
                                           "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                                                          "required": ["command"]}}}]
TASK = {"task_id": "t-viewer", "instruction": "Create hello.txt containing 'hello world'.", "num_samples": 1,
        "agent": {"custom_shell": "true", "model_name": "viewer-policy"}, "builder": {"strategy": "prefix_merging"},
        "metadata": {"group_id": "g-viewer"}}


@pytest.fixture(scope="module")
def engine(model_dir):
    return ModelEngine.load(model_dir)


@pytest.fixture
def engine_app(engine):
    return create_engine(engine, policies={"viewer-policy": ScriptedPolicy.load(POLICY, name="viewer-policy")})


def api_app(redis_url, tmp_path, engine_app, **overrides):
    settings = Settings(home=tmp_path, redis_url=redis_url, api_token=TOKEN, upstream_url=UPSTREAM, **overrides)
    return create_app(settings, engine_transport=httpx.WSGITransport(app=engine_app))


def play(client) -> None:
    """The example agent's loop: history replayed without the reasoning it was given (as
    examples/bash_agent.py does), which makes the turn after a reasoning turn drift."""
    messages = [{"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": TASK["instruction"]}]
    for _ in range(5):
        msg = client.chat.completions.create(model="viewer-policy", messages=messages, tools=TOOLS).choices[0].message
        turn = {"role": "assistant", "content": msg.content}
        if msg.tool_calls:
            turn["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.function.name, "arguments": c.function.arguments}} for c in msg.tool_calls]
        messages.append(turn)
        if not msg.tool_calls:
            return
        messages += [{"role": "tool", "tool_call_id": c.id, "content": "(exit status 0)"} for c in msg.tool_calls]
    raise AssertionError("the scripted policy did not finish")


@pytest.fixture
def finished(r, redis_url, tmp_path, stores, engine_app):
    """(api app, session id, its records): a task submitted through the API, its one session
    played through the proxy, merged and stored as a terminal result."""
    api = api_app(redis_url, tmp_path, engine_app)
    resp = api.test_client().post("/rollout/task/submit", json=TASK, headers=BEARER)
    [sid] = resp.get_json()["session_ids"]
    t0 = time.time()
    for status in (SessionStatus.INITIALIZING, SessionStatus.READY, SessionStatus.RUNNING):
        stores.sessions.transition(sid, status)
    proxy = create_proxy(proxy_settings(redis_url, tmp_path), transport=WSGITransport(engine_app))
    play(sdk_clients(proxy, stores.sessions.get(sid).key)["openai"])
    records, bad = stores.records.completions(sid)
    assert bad == 0 and len(records) == 3
    trajectory = builders.create("prefix_merging", {}).build(records, BuildContext(sid, TASK["task_id"], None, {}))
    for trace in trajectory.traces:
        trace.reward = 1.0
    t1 = time.time()
    timing = SessionTiming(registered_at=t0 - 0.5, init_started_at=t0 - 0.4, ready_at=t0 - 0.2, run_started_at=t0,
                           run_ended_at=t1, postrun_started_at=t1 + 0.05, postrun_ended_at=t1 + 0.1,
                           evaluate_started_at=t1 + 0.15, evaluate_ended_at=t1 + 0.3, finished_at=t1 + 0.35)
    stores.outputs.save_result(sid, SessionResult(session_id=sid, task_id=TASK["task_id"], status=SessionStatus.COMPLETED,
                                                  reward=1.0, trajectory=trajectory, timing=timing))
    return api, sid, sorted(records, key=lambda c: c.started_at)


def logged_in(api):
    client = api.test_client()
    resp = client.post("/viewer/session", json={"token": TOKEN})
    assert resp.status_code == 200
    return client, resp


def test_the_view_model_matches_the_records_and_the_engines_decoding(finished, engine):
    api, sid, records = finished
    client, _ = logged_in(api)
    resp = client.get(f"/viewer/api/session/{sid}")
    assert resp.status_code == 200, resp.get_data(as_text=True)
    view = resp.get_json()
    assert (view["status"], view["reward"], view["builder"], view["finished"]) == ("COMPLETED", 1.0, "prefix_merging", True)
    assert view["detokenize"] == {"enabled": True, "used": True, "failed": False}
    [trace] = view["traces"]
    tokens, segments = trace["tokens"], trace["segments"]
    turns = [s for s in segments if s["kind"] == "turn"]
    inters = [s for s in segments if s["kind"] == "interstitial"]
    assert [s["kind"] for s in segments] == ["turn", "interstitial", "turn", "interstitial", "turn"]
    assert sum(s["len"] for s in segments) == trace["response_len"] == len(tokens["ids"])

    def cut(seg, column):
        return tokens[column][seg["start"]:seg["start"] + seg["len"]]

    for turn, record in zip(turns, records):  # every sampled token trainable, with its behaviour logprob
        assert turn["completion_id"] == record.completion_id
        assert cut(turn, "ids") == record.response_ids and all(cut(turn, "trainable"))
        assert cut(turn, "logprob") == pytest.approx(record.response_logprobs)
        assert "".join(cut(turn, "text")) == engine.decode(record.response_ids, skip_special_tokens=False)
    for inter in inters:
        assert not any(cut(inter, "trainable")) and set(cut(inter, "logprob")) == {None}
    # The first interstitial is exactly what the second prompt adds after the first sampled turn.
    first, second = records[0], records[1]
    added = second.prompt_ids[len(first.prompt_ids) + len(first.response_ids):]
    assert cut(inters[0], "ids") == added and inters[0]["text"] == engine.decode(added, skip_special_tokens=False)
    assert "<tool_response>" in inters[0]["text"] and "(exit status 0)" in inters[0]["text"]
    assert trace["prompt"]["text"] == engine.decode(first.prompt_ids, skip_special_tokens=False)
    assert trace["trainable_count"] == sum(len(r.response_ids) for r in records) and trace["text_complete"]

    # Turn 1 was sampled with reasoning the agent did not replay: turn 2's context drifted.
    assert [t["drifted"] for t in turns] == [False, False, True] and trace["drifted_turns"] == [2]
    assert view["reconstruction"]["drifted_turns"] == 1
    assert [t["tool_calls"] for t in turns] == [["bash"], ["bash"], []]
    spans = trace["spans"]
    assert [s["turn"] for s in spans] == [0, 1]
    for span in spans:
        text = "".join(tokens["text"][span["start"]:span["end"]])
        assert re.fullmatch(r"\s*<tool_call>.*</tool_call>\s*", text, re.S), text
        assert '"name": "bash"' in text
    payload = "".join(cut(turns[0], "text"))
    assert "<script>document.title='pwned-script'</script>" in payload and "onerror=" in payload  # raw: escaping is the page's

    tl = view["timeline"]
    assert [b["stage"] for b in tl["stages"]] == ["QUEUE", "INIT", "READY", "RUN", "POSTRUN", "EVALUATE", "CALLBACK"]
    assert all(b["end"] >= b["start"] >= 0 for b in tl["stages"])
    assert [(c["completion_id"], c["trace"], c["turn"]) for c in tl["calls"]] == \
        [(r.completion_id, 0, k) for k, r in enumerate(records)]
    run = next(b for b in tl["stages"] if b["stage"] == "RUN")
    assert all(run["start"] <= c["start"] <= c["end"] <= run["end"] for c in tl["calls"])
    assert [c["response_tokens"] for c in tl["calls"]] == [len(r.response_ids) for r in records]


def test_tasks_and_task_routes_list_the_task_and_its_session(finished):
    api, sid, _ = finished
    client, _ = logged_in(api)
    tasks = client.get("/viewer/api/tasks").get_json()["tasks"]
    assert client.get("/viewer/api/tasks?limit=²").status_code == 400
    assert client.get("/viewer/api/tasks?limit=1").get_json()["tasks"] == tasks[:1]
    assert [(t["task_id"], t["total_sessions"], t["group_id"]) for t in tasks] == [("t-viewer", 1, "g-viewer")]
    task = client.get("/viewer/api/task/t-viewer").get_json()
    assert task["builder"] == "prefix_merging" and task["model_name"] == "viewer-policy"
    assert [s["session_id"] for s in task["sessions"]] == [sid] and "results" not in task


def test_login_cookie_is_derived_scoped_and_opens_only_the_viewers_reads(finished):
    api, sid, _ = finished
    anonymous = api.test_client()
    for path in ("/viewer/api/tasks", "/viewer/api/task/t-viewer", f"/viewer/api/session/{sid}"):
        resp = anonymous.get(path)
        assert resp.status_code == 401 and resp.get_json()["error"]["type"] == "unauthorized"
        assert api.test_client().get(path, headers=BEARER).status_code == 200  # the bearer header works too
    assert anonymous.post("/viewer/session", json={"token": "wrong"}).status_code == 401
    for bad in (b"{", b'{"token": 5}', b"[]"):
        resp = anonymous.post("/viewer/session", data=bad, content_type="application/json")
        assert resp.status_code == 400 and resp.get_json()["error"]["type"] == "invalid_request"
    # open to anyone, so a login body is small: 15 MB from strangers had grown the API by 15 MB a connection
    big = anonymous.post("/viewer/session", data=b'{"token": "' + b"a" * 10_000 + b'"}', content_type="application/json")
    assert big.status_code == 413 and big.get_json()["error"]["message"]

    client, resp = logged_in(api)
    cookie = resp.headers["Set-Cookie"]
    assert TOKEN not in cookie
    attributes = {a.strip().split("=")[0].lower(): a for a in cookie.split(";")}
    assert {"httponly", "samesite", "path", "max-age"} <= set(attributes)
    assert attributes["samesite"].strip() == "SameSite=Strict" and attributes["path"].strip() == "Path=/viewer/api"
    value = cookie.split(";")[0].split("=", 1)[1]
    assert client.get(f"/viewer/api/session/{sid}").status_code == 200
    # The cookie is nothing outside the viewer's GET data routes: not a way to submit or cancel.
    with_cookie = api.test_client()
    with_cookie.set_cookie("polar_viewer", value, path="/")
    assert with_cookie.get("/viewer/api/tasks").status_code == 200
    assert with_cookie.get("/rollout/status").status_code == 401
    assert with_cookie.get("/rollout/task/t-viewer").status_code == 401
    assert with_cookie.delete("/rollout/task/t-viewer").status_code == 401
    assert with_cookie.post("/rollout/task/submit", json={**TASK, "task_id": "t-csrf"}).status_code == 401
    # A forged or tampered cookie is refused; logging out clears it.
    expires = value.split(".")[1]
    for forged in (f"v1.{expires}.{'0' * 64}", value[:-1] + ("0" if value[-1] != "0" else "1"), f"v1.1.{value[-64:]}"):
        other = api.test_client()
        other.set_cookie("polar_viewer", forged, path="/viewer/api")
        assert other.get("/viewer/api/tasks").status_code == 401
    out = client.delete("/viewer/session")
    assert out.status_code == 200 and "Max-Age=0" in out.headers["Set-Cookie"]
    assert client.get("/viewer/api/tasks").status_code == 401


def test_unknown_ids_are_404_in_json(finished):
    api, _, _ = finished
    client, _ = logged_in(api)
    for path in ("/viewer/api/session/sess-00000000000000000000000000000000", "/viewer/api/task/no-such-task",
                 "/viewer/static/app.py", "/viewer/static/..%2F__init__.py"):
        resp = client.get(path)
        assert resp.status_code == 404 and resp.get_json()["error"]["type"] == "not_found", path


def test_the_page_and_its_files_are_served_with_a_strict_csp(finished):
    api, _, _ = finished
    client = api.test_client()  # no token: the page holds no data
    for path, kind in (("/viewer/", "text/html"), ("/viewer/static/viewer.js", "text/javascript"),
                       ("/viewer/static/viewer.css", "text/css")):
        resp = client.get(path)
        assert resp.status_code == 200 and resp.mimetype == kind
        csp = resp.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
    page = client.get("/viewer/").get_data(as_text=True)
    assert "<script>" not in page and "http" not in page.replace("http-equiv", "")  # nothing inline, nothing remote
    assert "innerHTML" not in client.get("/viewer/static/viewer.js").get_data(as_text=True)


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_once_redis_forgets_the_session_its_results_file_gives_the_same_view(finished, stores, tmp_path, fmt):
    api, sid, records = finished
    client, _ = logged_in(api)
    from_redis = client.get(f"/viewer/api/session/{sid}").get_json()
    results_dir.write(tmp_path / "results", stores.outputs.result(sid), records, [], fmt=fmt)
    stores.r.delete(keys.session_result(sid), keys.session_completions(sid), keys.session_errors(sid),
                    keys.session(sid))
    from_file = client.get(f"/viewer/api/session/{sid}").get_json()
    assert (from_redis["source"], from_file["source"]) == ("redis", "file")
    assert from_file["traces"] == from_redis["traces"] and from_file["timeline"] == from_redis["timeline"]


def test_without_an_engine_the_view_falls_back_to_ids(finished, redis_url, tmp_path):
    _, sid, records = finished
    for overrides in ({"viewer_detokenize": False}, {"upstream_url": "http://127.0.0.1:9"}):
        settings = Settings(home=tmp_path, redis_url=redis_url, api_token=TOKEN,
                            **{"upstream_url": UPSTREAM, **overrides})
        view = create_app(settings).test_client().get(f"/viewer/api/session/{sid}", headers=BEARER).get_json()
        [trace] = view["traces"]
        inter = next(s for s in trace["segments"] if s["kind"] == "interstitial")
        assert inter.get("text") is None and trace["prompt"]["text"] is None and not trace["text_complete"]
        turn = trace["segments"][0]
        assert None not in trace["tokens"]["text"][:turn["len"]]  # sampled tokens keep the engine's own text
        assert view["detokenize"]["failed"] == ("upstream_url" in overrides)


def test_an_oversized_login_names_the_logins_own_limit(redis_url, tmp_path, engine_app):
    """A 10 kB login body was refused as exceeding 16777216 bytes (the submit limit), though the
    login's is 4096. Found by posting one to a running stack's /viewer/session."""
    from pipeline.api.viewer import LOGIN_MAX_BYTES

    api = api_app(redis_url, tmp_path, engine_app)
    resp = api.test_client().post("/viewer/session", data=b'{"token": "' + b"a" * 10_000 + b'"}',
                                  content_type="application/json")
    assert resp.status_code == 413, resp.data
    assert resp.get_json()["error"]["message"] == f"request body exceeds {LOGIN_MAX_BYTES} bytes"
