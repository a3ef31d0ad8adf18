"""Durable results through the real stages (in this process, memory runtime, real Redis): the
CALLBACK stage writes one file per session in Polar's layout before publishing, the task status
lists them, the API serves a session's result and completions from Redis and then from the file,
and the reaper prunes old files."""

from __future__ import annotations

import os
import time

import pytest

from pipeline import keys, results_dir
from pipeline.api.app import create_app
from pipeline.status import Stage
from tests.inproc.test_pipeline import deps, run_all, submit  # noqa: F401 - deps is a fixture
from workers.stages import reaper
from workers.stages.bodies import BODIES
from workers.stages.common import run_stage

TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def api(deps):  # noqa: F811
    return create_app(deps.settings.replace(api_token=TOKEN)).test_client()


def finished(d, n=2) -> tuple[str, list[str]]:
    sids = submit(d, num_samples=n, task_id="..:run")  # a task id that is no safe folder name
    for sid in sids:
        assert run_all(d, sid) == ["done"] * 5
    return "..:run", sids


def files(d) -> list:
    """The session files (the session index beside them is checked apart)."""
    root = d.settings.results_path
    return sorted(p for p in root.rglob("*") if p.is_file() and p.parent.name != results_dir.INDEX)


def test_callback_writes_one_file_per_session_in_polars_layout(deps):  # noqa: F811
    task_id, sids = finished(deps)
    written = files(deps)
    assert len(written) == 2 and {p.parent for p in written} == {written[0].parent}
    assert written[0].parent.parent == deps.settings.results_path
    assert written[0].parent.name.startswith("task_.._run~")  # sanitised, hashed, one level
    assert {p.name for p in written} == {f"ses_{sid}.json" for sid in sids}
    status = deps.stores.tasks.status(task_id)
    assert status.result_paths == [str(written[0].parent / f"ses_{sid}.json") for sid in sids]
    # A redelivered CALLBACK (its done marker lost) rewrites the same file, never a second one.
    deps.stores.sessions._r.hdel(keys.session(sids[0]), "done:callback")
    assert run_stage(Stage.CALLBACK, sids[0], *BODIES[Stage.CALLBACK], d=deps) == "done"
    assert files(deps) == written
    assert deps.stores.r.xlen(keys.RESULTS_STREAM) == 2  # and the stream got it once


def test_api_serves_a_session_from_redis_then_from_its_file(deps, api):  # noqa: F811
    _, [sid] = finished(deps, n=1)
    result, completions = api.get(f"/rollout/session/{sid}", headers=AUTH), \
        api.get(f"/rollout/session/{sid}/completions", headers=AUTH)
    assert result.status_code == 200 and result.headers["X-Polar-Source"] == "redis"
    assert result.get_json()["session_id"] == sid and result.get_json()["reward"] == 1.0
    assert completions.status_code == 200 and completions.headers["X-Polar-Source"] == "redis"
    assert len(completions.get_json()["completions"]) == 2  # the agent's two model calls

    # Redis forgets the session (its TTLs ran out): the file answers the same.
    r = deps.stores.r
    r.delete(keys.session_result(sid), keys.session_completions(sid), keys.session_errors(sid), keys.session(sid))
    from_file = api.get(f"/rollout/session/{sid}", headers=AUTH)
    assert from_file.status_code == 200 and from_file.headers["X-Polar-Source"] == "file"
    assert from_file.get_json() == result.get_json()
    again = api.get(f"/rollout/session/{sid}/completions", headers=AUTH)
    assert again.status_code == 200 and again.headers["X-Polar-Source"] == "file"
    assert again.get_json()["completions"] == completions.get_json()["completions"]

    for path in (f"/rollout/session/{sid}", f"/rollout/session/{sid}/completions"):
        assert api.get(path).status_code == 401
        assert api.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
    for path in ("/rollout/session/sess-nope", "/rollout/session/sess-nope/completions",
                 "/rollout/session/..%2F..%2Fetc/completions"):
        missing = api.get(path, headers=AUTH)
        assert missing.status_code == 404 and missing.get_json()["error"]["type"] == "not_found"


def test_pipeline_status_shows_the_results_stream(deps, api):  # noqa: F811
    finished(deps, n=1)
    stream = api.get("/rollout/status?workers=0", headers=AUTH).get_json()["results_stream"]
    assert stream["length"] == 1 and stream["dead_letters"] == 0 and stream["trims_held_back"] == 0
    dead = api.get("/rollout/results/dead-letters?count=5", headers=AUTH)
    assert dead.status_code == 200 and dead.get_json()["entries"] == []
    for bad in ("x", "²", "-1", "1.5"):  # '²'.isdigit() is true, int('²') fails: was a 500
        refused = api.get(f"/rollout/results/dead-letters?count={bad}", headers=AUTH)
        assert refused.status_code == 400 and "'count' must be a whole number" in refused.get_json()["error"]["message"]


def test_the_reaper_prunes_results_past_their_retention(deps):  # noqa: F811
    finished(deps, n=2)
    old, new = files(deps)
    past = time.time() - (deps.settings.results_keep_days + 1) * 86400
    os.utime(old, (past, past))
    os.utime(old.parent, (past, past))  # (a folder not written to lately is looked into)
    reaper._artifacts_pruned[0] = 0.0  # due now
    reaper.sweep(deps)
    assert files(deps) == [new]
    os.utime(new, (past, past))
    reaper._artifacts_pruned[0] = 0.0  # due again, but another worker of this host pruned this round
    reaper.sweep(deps)
    assert files(deps) == [new]
