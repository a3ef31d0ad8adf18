"""Sessions through every stage in this process: the stage bodies under their redelivery guard,
the in-process ``memory`` runtime, an "agent" that calls the proxy app through the OpenAI SDK,
real Redis. The same code runs in Celery workers in tests/e2e; here no process is started."""

from __future__ import annotations

from pathlib import Path

import httpx2
import openai
import pytest

from infra import fake_upstream
from pipeline import keys
from pipeline.schemas import TaskRequest
from pipeline.settings import Settings
from pipeline.status import SessionStatus, Stage, TaskState
from pipeline.stores.queues import priority_lists
from proxy.app import create_app as create_proxy
from proxy.upstream import WSGITransport
from tests.inproc.conftest import BASE, UPSTREAM
from tests.support import MSG
from workers.runtimes.base import ExecResult
from workers.runtimes.memory import BACKEND as MEMORY
from workers.runtimes.memory import MemoryRuntime
from workers.stages.bodies import BODIES
from workers.stages.common import make_deps, run_stage


@pytest.fixture
def deps(r, redis_url, tmp_path):
    settings = Settings(home=tmp_path, redis_url=redis_url, upstream_url=UPSTREAM, proxy_url=BASE,
                        inflight_drain_seconds=0, plugin_modules="workers.runtimes.memory")
    d = make_deps(settings)
    proxy = create_proxy(settings, transport=WSGITransport(fake_upstream.app))

    def agent(rt: MemoryRuntime, argv: list[str], env: dict[str, str]) -> ExecResult:
        """A two-call agent: what a harness does, through the URL and key it was given."""
        sdk = openai.OpenAI(base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0,
                            http_client=httpx2.Client(transport=httpx2.WSGITransport(app=proxy)))
        for _ in range(2):
            sdk.chat.completions.create(model="fake", messages=MSG)
        rt.files[rt.path("hello.txt")] = rt.files[rt.path("/polar/session/instruction.txt")]
        return ExecResult(int(argv[1]) if len(argv) > 1 else 0, stdout="done")

    def check(rt: MemoryRuntime, argv: list[str], env: dict[str, str]) -> ExecResult:
        return ExecResult(0 if rt.files.get(rt.path("hello.txt")) == b"write hello.txt" else 1)

    MemoryRuntime.commands.update(agent=agent, check=check)
    yield d
    MemoryRuntime.commands.clear()
    MemoryRuntime.live.clear()


def submit(d, **overrides) -> list[str]:
    task = {"instruction": "write hello.txt", "num_samples": 2, "runtime": {"backend": MEMORY},
            "agent": {"custom_shell": "agent"}, "evaluator": {"strategy": "command", "config": {"command": "check"}},
            **overrides}
    return [s.session_id for s in d.stores.tasks.create(TaskRequest.model_validate(task))]


def run_all(d, sid: str) -> list[str]:
    return [run_stage(stage, sid, *BODIES[stage], d=d) for stage in Stage]


def test_sessions_go_through_every_stage_and_reach_the_stream(deps):
    sids = submit(deps)
    for sid in sids:
        assert run_all(deps, sid) == ["done"] * 5
    for sid in sids:
        result = deps.stores.outputs.result(sid)
        assert result.status == SessionStatus.COMPLETED and result.reward == 1.0, (result.status, result.error)
        assert len(result.trajectory.traces) == 2  # per_request: one trace per model call
        assert all(t.response_ids == [101, 102, 103] and t.reward == 1.0 for t in result.trajectory.traces)
        assert MemoryRuntime.live[sid].stopped  # EVALUATE tore the runtime down
    deps.stores.results.ensure_group("trainer")
    entries = deps.stores.results.read("trainer", "rank0", pending=False, count=10, block_ms=None)
    assert sorted(e.session_id for e in entries) == sorted(sids)
    task_id = deps.stores.outputs.result(sids[0]).task_id
    assert deps.stores.tasks.status(task_id).status == TaskState.COMPLETED


def test_every_stage_runs_after_redis_forgot_its_scripts(deps, r):
    """A restarted Redis has no scripts loaded: each stage's pipelined scripts are loaded and the
    pipeline run again (every step safe to repeat), nothing lost or applied twice."""
    [sid] = submit(deps, num_samples=1)
    outcomes = []
    for stage in Stage:
        r.script_flush()
        outcomes.append(run_stage(stage, sid, *BODIES[stage], d=deps))
    assert outcomes == ["done"] * 5
    result = deps.stores.outputs.result(sid)
    assert result.status == SessionStatus.COMPLETED and result.reward == 1.0
    assert r.xlen(keys.RESULTS_STREAM) == 1 and r.scard(keys.task_finished(result.task_id)) == 1
    assert deps.stores.sessions.status(sid) == SessionStatus.COMPLETED


def test_redelivered_stages_do_nothing_twice(deps):
    [sid] = submit(deps, num_samples=1)
    run_all(deps, sid)
    calls = len(deps.stores.records.completions(sid)[0])
    assert run_all(deps, sid) == ["already-done"] * 5
    assert len(deps.stores.records.completions(sid)[0]) == calls  # the agent did not run again
    assert len(MemoryRuntime.live[sid].executed) == 2  # agent + check, once each


def test_an_agent_that_fails_ends_error_with_its_partial_trajectory(deps):
    [sid] = submit(deps, num_samples=1, agent={"custom_shell": "agent 3"})
    run_all(deps, sid)
    result = deps.stores.outputs.result(sid)
    assert result.status == SessionStatus.ERROR and "agent exited 3" in result.error
    assert len(result.trajectory.traces) == 2  # what the model sampled is kept


def test_an_agent_that_exits_on_the_refusal_a_cancel_brings_is_cancelled(deps):
    """Cancelled mid-run, the agent's next model call is refused (403) and it exits 1 before the
    runtime notices the cancel: the session ended because of the cancel, not by an agent error."""
    def cancelled_agent(rt: MemoryRuntime, argv: list[str], env: dict[str, str]) -> ExecResult:
        sdk = openai.OpenAI(base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0,
                            http_client=httpx2.Client(transport=httpx2.WSGITransport(app=deps_proxy[0])))
        sdk.chat.completions.create(model="fake", messages=MSG)
        assert deps.stores.sessions.request_cancel(env["POLAR_SESSION_ID"])
        try:
            sdk.chat.completions.create(model="fake", messages=MSG)
        except openai.PermissionDeniedError as exc:
            return ExecResult(1, stderr=f"Error: {exc}")
        return ExecResult(0)

    deps_proxy = [create_proxy(deps.settings, transport=WSGITransport(fake_upstream.app))]
    MemoryRuntime.commands["cancelled-agent"] = cancelled_agent
    [sid] = submit(deps, num_samples=1, agent={"custom_shell": "cancelled-agent"})
    run_all(deps, sid)
    result = deps.stores.outputs.result(sid)
    assert result.status == SessionStatus.CANCELLED, (result.status, result.error)
    assert len(result.trajectory.traces) == 1  # the call before the cancel is kept


def test_an_agent_that_fails_once_its_budget_is_over_timed_out(deps):
    """Past its agent_timeout the proxy refuses the agent's calls; one that exits on that error
    before the runtime kills it ran out of time, it did not fail on its own."""
    import time

    def late_agent(rt: MemoryRuntime, argv: list[str], env: dict[str, str]) -> ExecResult:
        time.sleep(0.4)
        return ExecResult(1, stderr="Error: 403 session is past its time budget")

    MemoryRuntime.commands["late-agent"] = late_agent
    [sid] = submit(deps, num_samples=1, agent={"custom_shell": "late-agent"}, metadata={"agent_timeout": 0.3})
    run_all(deps, sid)
    result = deps.stores.outputs.result(sid)
    assert result.status == SessionStatus.TIMEOUT and "agent_timeout" in result.error, (result.status, result.error)


def test_a_run_worker_lost_after_a_cancel_ends_cancelled(deps):
    from workers.stages import run

    [sid] = submit(deps, num_samples=1)
    for status in (SessionStatus.INITIALIZING, SessionStatus.READY, SessionStatus.RUNNING):
        deps.stores.sessions.transition(sid, status)
    deps.stores.sessions.request_cancel(sid)
    assert run.recover(deps, deps.stores.sessions.get(sid)) == Stage.POSTRUN
    state = deps.stores.sessions.get(sid)
    assert state.outcome.value == "cancelled" and state.status == SessionStatus.POSTRUN


def test_a_call_still_in_flight_when_postrun_builds_is_named_not_silently_missing(deps, r):
    """The agent was stopped with a call inside the proxy and the engine outlasts the drain: the
    trajectory is built without it and says so."""
    import time

    [sid] = submit(deps, num_samples=1)
    assert [run_stage(stage, sid, *BODIES[stage], d=deps) for stage in (Stage.INIT, Stage.RUN)] == ["done"] * 2
    # A call the proxy admitted before the agent was stopped: its in-flight lease, no record yet.
    r.zadd(keys.session_calls(sid), {"call-late": time.time() + 60})
    assert deps.stores.sessions.inflight_calls(sid) == 1
    assert run_stage(Stage.POSTRUN, sid, *BODIES[Stage.POSTRUN], d=deps) == "done"
    trajectory = deps.stores.outputs.trajectory(sid)
    assert trajectory.metadata["calls_in_flight_left_out"] == 1 and trajectory.metadata["completions"] == 2


def test_an_agent_is_stopped_when_the_disk_runs_full_and_not_otherwise(deps):
    """An agent writing without end fills the disk, and with it Redis's append-only file, the
    logs and every other session: below POLAR_MIN_FREE_DISK_MB free, RUN stops the agent and
    the session ends ERROR saying why. (A real process in the local runtime; the floor is set
    above what this disk has, then off.)"""
    import time

    for floor, agent in ((10**9, "sleep 60"), (0, "sleep 0.6")):
        d = make_deps(deps.settings.model_copy(update={"min_free_disk_mb": floor}))
        [sid] = submit(d, num_samples=1, runtime={"backend": "local"}, agent={"custom_shell": agent},
                       evaluator={"strategy": "session_completed"})
        started = time.monotonic()
        assert run_all(d, sid) == ["done"] * 5
        result = d.stores.outputs.result(sid)
        if floor:
            assert time.monotonic() - started < 20  # stopped within a poll, not after 60 s
            assert result.status == SessionStatus.ERROR and "POLAR_MIN_FREE_DISK_MB" in result.error, result.error
        else:
            assert "POLAR_MIN_FREE_DISK_MB" not in (result.error or ""), result.error


def test_an_agent_is_stopped_when_the_disk_runs_out_of_inodes(deps):
    """Small files without end use up a filesystem's inodes long before its space (the space
    floor never trips), and then nothing on it can make a file: below POLAR_MIN_FREE_INODES free
    files RUN stops the agent, saying so. (The floor is set above what this disk has.)"""
    import os
    import time

    if not os.statvfs(deps.settings.home).f_files:
        pytest.skip("this filesystem has no fixed inode count")
    d = make_deps(deps.settings.model_copy(update={"min_free_disk_mb": 1, "min_free_inodes": 10**12}))
    [sid] = submit(d, num_samples=1, runtime={"backend": "local"}, agent={"custom_shell": "sleep 60"},
                   evaluator={"strategy": "session_completed"})
    started = time.monotonic()
    assert run_all(d, sid) == ["done"] * 5
    result = d.stores.outputs.result(sid)
    assert time.monotonic() - started < 20  # stopped within a poll, not after 60 s
    assert result.status == SessionStatus.ERROR and "POLAR_MIN_FREE_INODES" in result.error, result.error
    assert "files (inodes)" in result.error and "POLAR_MIN_FREE_DISK_MB" not in result.error


def test_time_a_call_waited_out_a_weight_sync_pause_is_not_charged_to_the_agent(deps):
    """A trainer holds the proxy paused for 3 s while the agent's model call waits: the agent's
    own 1.5 s budget moves by that much, the call (answered past the nominal end) is admitted,
    and the session completes with the wait recorded. The same pause while no call of the
    session waits (the agent is busy with its own work) moves nothing: the agent times out, as
    it does with no pause. (A real process in the local runtime, the proxy app in-process.)"""
    import threading
    import time

    proxy = create_proxy(deps.settings, transport=WSGITransport(fake_upstream.app))
    control = deps.stores.proxy_control

    def trainer(sid: str, answered: list[object], call: bool) -> None:
        while deps.stores.sessions.status(sid) != SessionStatus.RUNNING:
            time.sleep(0.02)
        control.hold_pause("trainer", 30)
        if call:  # the agent's call, parked by the pause
            key = deps.stores.sessions.get(sid).key
            sdk = openai.OpenAI(base_url=f"{BASE}/s/{key}/v1", api_key=key, max_retries=0,
                                http_client=httpx2.Client(transport=httpx2.WSGITransport(app=proxy)))
            waiting = threading.Thread(target=lambda: answered.append(_answer(sdk)))
            waiting.start()
        time.sleep(3.0)
        control.release_pause("trainer")
        if call:
            waiting.join(timeout=30)

    for case in ("a call waits", "no call waits", "no pause"):
        answered: list[object] = []
        [sid] = submit(deps, num_samples=1, runtime={"backend": "local"}, agent={"custom_shell": "sleep 3.2"},
                       evaluator={"strategy": "session_completed"}, metadata={"agent_timeout": 1.5})
        held = threading.Thread(target=trainer, args=(sid, answered, case == "a call waits"))
        if case != "no pause":
            held.start()
        assert run_all(deps, sid) == ["done"] * 5
        if case != "no pause":
            held.join()
        result = deps.stores.outputs.result(sid)
        if case == "a call waits":
            assert answered and isinstance(answered[0], str), answered  # answered 3 s into a 1.5 s budget
            assert result.status == SessionStatus.COMPLETED, (result.status, result.error)
            assert 2.5 <= result.timing.run_paused_seconds <= 3.3, result.timing
        else:
            assert result.status == SessionStatus.TIMEOUT and "agent_timeout" in result.error, (case, result.error)
            assert result.timing.run_paused_seconds is None


def test_a_wait_that_began_since_the_last_cancel_poll_is_read_before_the_agent_is_ended(deps):
    """The agent's call parks just before its limit, long before RUN's next cancel poll is due
    (60 s here): RUN reads the session's wait as the limit is reached, instead of killing the
    agent mid-pause with its wait charged to it."""
    import threading
    import time

    d = make_deps(deps.settings.model_copy(update={"cancel_poll_seconds": 60.0}))
    proxy = create_proxy(d.settings, transport=WSGITransport(fake_upstream.app))
    [sid] = submit(d, num_samples=1, runtime={"backend": "local"}, agent={"custom_shell": "sleep 3.5"},
                   evaluator={"strategy": "session_completed"}, metadata={"agent_timeout": 1.5})
    answered: list[object] = []

    def trainer() -> None:
        while d.stores.sessions.status(sid) != SessionStatus.RUNNING:
            time.sleep(0.02)
        time.sleep(0.5)
        d.stores.proxy_control.hold_pause("trainer", 30)
        key = d.stores.sessions.get(sid).key
        sdk = openai.OpenAI(base_url=f"{BASE}/s/{key}/v1", api_key=key, max_retries=0,
                            http_client=httpx2.Client(transport=httpx2.WSGITransport(app=proxy)))
        waiting = threading.Thread(target=lambda: answered.append(_answer(sdk)))
        waiting.start()
        time.sleep(2.5)  # the agent's 1.5 s pass meanwhile
        d.stores.proxy_control.release_pause("trainer")
        waiting.join(timeout=30)

    held = threading.Thread(target=trainer)
    held.start()
    assert run_all(d, sid) == ["done"] * 5
    held.join()
    result = d.stores.outputs.result(sid)
    assert result.status == SessionStatus.COMPLETED, (result.status, result.error)
    assert answered and isinstance(answered[0], str), answered


def _answer(sdk) -> object:
    try:
        return sdk.chat.completions.create(model="fake", messages=MSG).choices[0].message.content
    except openai.APIStatusError as exc:
        return exc


def _running(fragment: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and fragment.encode() in (entry / "cmdline").read_bytes().replace(b"\0", b" "):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def test_what_the_agent_left_running_is_ended_before_anything_grades_in_its_runtime(deps):
    """A daemon the agent left (one that rewrites files while the tests run, say) is killed when
    RUN ends, before EVALUATE grades in the same runtime (a real process, the local runtime)."""
    daemon = "sleep 4711.25"
    [sid] = submit(deps, num_samples=1, runtime={"backend": "local"},
                   agent={"custom_shell": f"setsid {daemon} </dev/null >/dev/null 2>&1 & sleep 0.3"},
                   evaluator={"strategy": "session_completed"})
    assert [run_stage(stage, sid, *BODIES[stage], d=deps) for stage in (Stage.INIT, Stage.RUN)] == ["done"] * 2
    assert _running(daemon) == []
    assert [run_stage(stage, sid, *BODIES[stage], d=deps) for stage in list(Stage)[2:]] == ["done"] * 3


def test_a_missing_command_is_an_error_not_a_crash(deps):
    [sid] = submit(deps, num_samples=1, agent={"custom_shell": "no-such-agent"})
    assert run_all(deps, sid) == ["done"] * 5
    result = deps.stores.outputs.result(sid)
    assert result.status == SessionStatus.ERROR and "127" in result.error and result.trajectory.traces == []


def test_a_session_whose_init_failed_is_not_graded(deps):
    """A prepare step that fails after writing what the grader checks: the session ends ERROR
    with no reward (a grader run on the half-prepared runtime passed: ERROR with reward 1.0)."""
    def half_prepare(rt: MemoryRuntime, argv: list[str], env: dict[str, str]) -> ExecResult:
        rt.files[rt.path("hello.txt")] = b"write hello.txt"
        return ExecResult(1, stderr="the rest of the setup failed")

    MemoryRuntime.commands["half_prepare"] = half_prepare
    [sid] = submit(deps, num_samples=1, runtime={"backend": MEMORY, "prepare": [
        {"type": "exec", "command": "half_prepare", "max_attempts": 1}]})
    assert run_all(deps, sid) == ["done", "skipped", "done", "done", "done"]  # (INIT hands over to POSTRUN)
    result = deps.stores.outputs.result(sid)
    assert result.status == SessionStatus.ERROR and result.error.startswith("init:"), result.error
    assert result.reward is None and "never ran" in result.evaluation["skipped"]


# Keys without an expiry, each with the bound that keeps it small (docs/architecture.md).
BOUNDED = {
    "polar:results": "capped by POLAR_RESULTS_STREAM_MAXLEN (past it only by what a group has not acked)",
    "polar:results:dead": "capped by POLAR_RESULTS_STREAM_MAXLEN",
    "polar:results:trim-held": "one counter", "polar:results:backlog": "one value",
    "polar:tasks": "trimmed to the task retention at every submit",
    "polar:{leases}:expiry": "one entry per running stage", "polar:{leases}:owner": "one entry per running stage",
    "polar:{leases}:sent": "one entry per stage message not yet started",
    "polar:{ready}:list": "at most POLAR_READY_CAPACITY", "polar:{ready}:slots": "at most POLAR_READY_CAPACITY",
    "polar:callbacks:due": "one entry per callback still being delivered",
    "polar:proxy:calls": "one entry per call in flight (lapsed ones purged)",
    "polar:proxy:paused": "one flag", "polar:proxy:policy-version": "one value",
    "polar:proxy:pause-clock": "three numbers",
    "polar:metrics:stages": "stages x results x duration buckets", "polar:metrics:sessions": "one per terminal status",
}


STAGE_LISTS = {key for stage in Stage for key in priority_lists(stage.queue)}


def test_every_redis_key_expires_or_has_a_documented_bound(deps, r):
    for sid in submit(deps, num_samples=3):
        run_all(deps, sid)
    unbounded = []
    for key in r.scan_iter(count=1000):
        name = key.decode()
        if r.ttl(key) >= 0 or name in BOUNDED:
            continue
        if name.startswith("_kombu.binding.") or name in STAGE_LISTS:
            continue  # Celery's own: bindings, and the stage queues' lists (drained by the workers)
        unbounded.append(name)
    assert unbounded == []


def test_a_pipeline_with_two_scripts_is_refused_before_it_runs(r):
    """With two scripts in one MULTI, a Redis that forgot one would run the other alone."""
    from pipeline.stores import lua

    def build(pipe):
        pipe.set("polar:test:two-scripts", "1")
        for _ in range(2):
            lua.queue(pipe, lua.RESULTS_PUBLISH_ONCE, ["polar:test:m", "polar:test:s"], [60, b"p:", "data", b"x"])

    with pytest.raises(ValueError, match="one script at most"):
        lua.execute(r, build, transaction=True)
    assert r.get("polar:test:two-scripts") is None  # nothing was sent


def test_an_evaluate_copy_rerun_after_a_teardown_began_keeps_the_grade_not_regrades(deps, r, monkeypatch):
    """The evaluate worker dies (kill -9) while tearing the runtime down: the copy the reaper
    sends again must not grade what is left of it (a passing session graded 0.0). The grade was
    committed with the lease check before the teardown; the re-run takes it."""
    from pipeline.stores.leases import take_expired
    from workers.stages import evaluate

    [sid] = submit(deps, num_samples=1)
    assert [run_stage(s, sid, *BODIES[s], d=deps) for s in (Stage.INIT, Stage.RUN, Stage.POSTRUN)] == ["done"] * 3
    real_teardown = evaluate.teardown

    def dies_half_way(session_id, runtime, eval_runtime):
        MemoryRuntime.live[session_id].files.clear()  # part of the runtime is gone ...
        raise SystemExit("killed mid-teardown")  # ... when the worker dies

    monkeypatch.setattr(evaluate, "teardown", dies_half_way)
    with pytest.raises(SystemExit):
        run_stage(Stage.EVALUATE, sid, *BODIES[Stage.EVALUATE], d=deps)
    monkeypatch.setattr(evaluate, "teardown", real_teardown)
    r.zadd(keys.LEASE_EXPIRY, {keys.lease_member(Stage.EVALUATE.value, sid): 0})  # its lease lapsed
    assert take_expired(r) == [(sid, Stage.EVALUATE)]
    deps.stores.stage_runs.send(Stage.EVALUATE, sid)  # the reaper's resend
    assert run_stage(Stage.EVALUATE, sid, *BODIES[Stage.EVALUATE], d=deps) == "done"
    result = deps.stores.outputs.result(sid)
    assert result.status == SessionStatus.COMPLETED and result.reward == 1.0
    assert all(t.reward == 1.0 for t in result.trajectory.traces)


def test_an_agent_that_exits_0_after_its_last_call_failed_on_the_services_side_is_an_error(deps, r):
    """gemini_cli exits 0 when a streamed call fails: a Redis outage (the call admitted, no record
    written, not even the error) or a 5xx of the proxy or engine as its last call made a COMPLETED
    sample graded 0 and trained on. Now ERROR, saying why; a failed call retried is no such case."""
    [lost, failed, retried] = submit(deps, num_samples=3)
    run = MemoryRuntime.commands["agent"]
    assert [run_stage(stage, lost, *BODIES[stage], d=deps) for stage in (Stage.INIT, Stage.RUN)] == ["done"] * 2
    r.hincrby(keys.session(lost), "seq", 1)  # a third call admitted, then the proxy lost it with Redis

    def last_call_fails(rt, argv, env):
        result = run(rt, argv, env)
        sdk = openai.OpenAI(base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0,
                            http_client=httpx2.Client(transport=httpx2.WSGITransport(app=_proxy(deps))))
        with pytest.raises(openai.InternalServerError):
            sdk.chat.completions.create(model="fail-500", messages=MSG)
        if rt.session_id == retried:
            sdk.chat.completions.create(model="fake", messages=MSG)
        return result

    MemoryRuntime.commands["agent"] = last_call_fails
    for sid in (failed, retried):
        assert [run_stage(stage, sid, *BODIES[stage], d=deps) for stage in (Stage.INIT, Stage.RUN)] == ["done"] * 2
    for sid in (lost, failed, retried):
        assert [run_stage(stage, sid, *BODIES[stage], d=deps) for stage in (Stage.POSTRUN, Stage.EVALUATE,
                                                                              Stage.CALLBACK)] == ["done"] * 3
    by = {sid: deps.stores.outputs.result(sid) for sid in (lost, failed, retried)}
    assert by[lost].status == SessionStatus.ERROR and "1 admitted model call(s) left no record" in by[lost].error
    assert by[lost].trajectory.metadata["calls_unrecorded"] == 1
    assert by[failed].status == SessionStatus.ERROR and "502 UpstreamError" in by[failed].error
    assert by[retried].status == SessionStatus.COMPLETED and by[retried].reward == 1.0
    assert "calls_unrecorded" not in by[retried].trajectory.metadata


def _proxy(d):
    return create_proxy(d.settings, transport=WSGITransport(fake_upstream.app))
