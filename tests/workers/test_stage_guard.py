"""The redelivery guard around every stage, against a real Redis and the real Celery queues."""


import time

import pytest

from pipeline import keys
from pipeline.schemas import SessionResult, SessionSpec, TaskRequest
from pipeline.settings import Settings
from pipeline.status import SessionStatus as S
from pipeline.status import Stage
from pipeline.stores.leases import StageLease, held
from pipeline.stores.queues import queue_depths
from tests.support import wait_for
from workers.stages import init
from workers.stages.common import Skip, make_deps, run_stage


@pytest.fixture
def d(r, redis_url, tmp_path):
    # (grace 0: an expired lease is taken at the first pass; tests/redis/test_lease_take.py has the grace)
    return make_deps(Settings(home=tmp_path, redis_url=redis_url, stage_lease_seconds=5, lease_take_grace_seconds=0))


@pytest.fixture
def sid(d):
    task = TaskRequest.model_validate({"instruction": "x", "agent": {"custom_shell": "true"}})
    spec = SessionSpec.expand(task)[0]
    d.stores.sessions.register(spec)
    return spec.session_id


def queued(d, stage):
    return queue_depths(d.stores.r, [stage.queue])[stage.queue]


def walk_to(d, sid, status):
    path = [S.INITIALIZING, S.READY, S.RUNNING, S.POSTRUN, S.EVALUATING]
    for s in path[: path.index(status) + 1]:
        d.stores.sessions.transition(sid, s)


def test_normal_run_marks_done_and_sends_next(d, sid):
    calls = []
    assert run_stage(Stage.POSTRUN, sid, lambda *a: calls.append(1) or Stage.EVALUATE, d=d) == "done"
    assert calls == [1] and queued(d, Stage.EVALUATE) == 1
    # Redelivered: the body does not run again; only the next stage is sent again.
    assert run_stage(Stage.POSTRUN, sid, lambda *a: calls.append(2), d=d) == "already-done"
    assert calls == [1] and queued(d, Stage.EVALUATE) == 2


def test_a_live_duplicate_steps_aside(d, sid):
    holder = StageLease(d.stores.r, sid, Stage.RUN, 5)
    assert holder.acquire()
    try:
        assert run_stage(Stage.RUN, sid, lambda *a: pytest.fail("ran twice"), d=d) == "duplicate"
    finally:
        holder.release()


def test_dead_worker_is_recovered_not_rerun(d, sid):
    d.stores.sessions.mark_started(sid, Stage.RUN)  # a worker began RUN and died
    recovered = []
    out = run_stage(Stage.RUN, sid, lambda *a: pytest.fail("agent started twice"),
                    lambda dd, st: recovered.append(st.status) or Stage.POSTRUN, d=d)
    assert out == "done" and recovered == [S.REGISTERED] and queued(d, Stage.POSTRUN) == 1


def test_crash_after_status_write_resends_the_waiting_stage(d, sid):
    walk_to(d, sid, S.EVALUATING)  # POSTRUN moved the session on, then died before "done"

    def skip(*a):
        raise Skip("status is EVALUATING")

    assert run_stage(Stage.POSTRUN, sid, skip, d=d) == "skipped"
    assert queued(d, Stage.EVALUATE) == 1
    d.stores.outputs.save_result(sid, SessionResult(session_id=sid, task_id="t", status=S.COMPLETED))
    assert run_stage(Stage.EVALUATE, sid, skip, d=d) == "skipped"
    assert queued(d, Stage.CALLBACK) == 1


def test_recover_that_finds_the_stage_finished_sends_what_is_waiting(d, sid):
    walk_to(d, sid, S.READY)  # INIT finished (READY) but died before its "done" marker
    d.stores.sessions.mark_started(sid, Stage.INIT)
    assert run_stage(Stage.INIT, sid, lambda *a: pytest.fail("re-init"), lambda dd, st: None, d=d) == "done"
    assert queued(d, Stage.RUN) == 1


def test_unknown_session_is_ignored(d):
    assert run_stage(Stage.INIT, "sk-polar-gone", lambda *a: pytest.fail("ran"), d=d) == "missing"


def test_init_worker_lost_while_waiting_for_a_slot_starts_over(d, sid):
    d.stores.sessions.mark_started(sid, Stage.INIT)  # it died before touching a runtime
    ran = []
    assert run_stage(Stage.INIT, sid, lambda *a: ran.append(1) or Stage.RUN, init.recover, d=d) == "done"
    assert ran == [1] and queued(d, Stage.RUN) == 1


def test_reaper_sends_again_a_stage_whose_worker_died(d, sid):
    from workers.stages import reaper

    assert reaper.reap_once(d) == []  # registered, INIT just queued: nothing is lost
    walk_to(d, sid, S.RUNNING)
    live = StageLease(d.stores.r, sid, Stage.RUN, 0.3)
    assert live.acquire()
    wait_for(lambda: queued(d, Stage.RUN) == 0 and held(d.stores.r, sid, Stage.RUN), timeout=2)
    d.stores.r.delete(keys.REAPER_LOCK)
    assert reaper.reap_once(d) == []  # the RUN worker is alive: its lease heartbeats
    live.stop_heartbeat()  # ... and now it is dead
    wait_for(lambda: not held(d.stores.r, sid, Stage.RUN), timeout=5, interval=0.05)
    d.stores.r.delete(keys.REAPER_LOCK)
    assert reaper.reap_once(d) == [(sid, Stage.RUN)] and queued(d, Stage.RUN) == 1
    assert reaper.reap_once(d) == []  # one pass per interval across all workers (the lock)
    d.stores.r.delete(keys.REAPER_LOCK)
    assert reaper.reap_once(d) == []  # each lost lease is sent once


def test_a_message_sent_and_never_started_is_sent_again_once_its_queue_shows_it_lost(d, sid, monkeypatch):
    """A submission stored by an API that died before dispatching; a worker killed just after
    fetching a message (kombu has it in flight): sent, never started, not in its queue."""
    from pipeline.stores.leases import note_sent
    from workers.stages import reaper

    monkeypatch.setattr(reaper, "SENT_GRACE_SECONDS", 0.0)
    note_sent(d.stores.r, sid, Stage.INIT)  # recorded as sent ... and lost
    assert reaper.reap_once(d) == [(sid, Stage.INIT)] and queued(d, Stage.INIT) == 1
    d.stores.r.delete(keys.REAPER_LOCK)
    assert reaper.reap_once(d) == []  # now it waits in its queue: not sent twice
    assert run_stage(Stage.INIT, sid, lambda *a: None, d=d) == "done"  # starting it clears the record
    d.stores.r.delete(keys.REAPER_LOCK)
    d.stores.r.delete("init")
    assert reaper.reap_once(d) == []


def test_a_message_waiting_in_a_backlog_is_left_alone_until_the_queue_shows_it_lost(d, sid, monkeypatch):
    from pipeline.celery_app import dispatch
    from pipeline.stores.leases import note_sent
    from workers.stages import reaper

    monkeypatch.setattr(reaper, "SENT_GRACE_SECONDS", 0.0)
    monkeypatch.setattr(reaper, "SENT_SCAN_AFTER_SECONDS", 0.0)
    other = SessionSpec.expand(TaskRequest.model_validate({"instruction": "x", "agent": {"custom_shell": "true"}}))[0]
    d.stores.sessions.register(other)
    dispatch(d.app, Stage.INIT, other.session_id)  # a backlog: someone else's message
    note_sent(d.stores.r, sid, Stage.INIT)
    dispatch(d.app, Stage.INIT, sid)  # ours, in the queue
    assert reaper.reap_once(d) == []  # found in the queue (searched by its session id)
    d.stores.r.lpop("init")  # lost (kombu LPUSHes and BRPOPs: ours, the newest, is leftmost)
    d.stores.r.delete(keys.REAPER_LOCK)
    assert reaper.reap_once(d) == [(sid, Stage.INIT)]


def test_a_live_lease_cannot_be_taken_and_a_dead_one_can(d, sid):
    first = StageLease(d.stores.r, sid, Stage.INIT, 0.3)
    assert first.acquire()
    assert not StageLease(d.stores.r, sid, Stage.INIT, 5).acquire()
    first.stop_heartbeat()
    wait_for(lambda: StageLease(d.stores.r, sid, Stage.INIT, 5).acquire(), timeout=5, interval=0.05)
    assert first.lost.is_set() is False  # it stopped beating, so it never learnt; a beating one would


def test_a_lease_taken_after_the_keeper_went_idle_is_still_renewed(d, sid):
    """The keeper thread outlives the stages it renews; one that is idle must wake for a new lease."""
    first = StageLease(d.stores.r, sid, Stage.INIT, 0.3)
    assert first.acquire()
    first.release()  # nothing held now: the keeper idles
    time.sleep(0.2)
    second = StageLease(d.stores.r, sid, Stage.RUN, 0.3)
    assert second.acquire()
    try:
        time.sleep(1.2)  # four times its TTL
        assert held(d.stores.r, sid, Stage.RUN) and not second.lost.is_set()
    finally:
        second.release()


def test_leases_taken_while_a_beat_is_planned_are_renewed_in_time(d, sid):
    """A new lease wakes the keeper only when the planned beat would come too late for it: one of
    the same TTL rides on the planned beat, a shorter one gets an earlier beat."""
    slow = StageLease(d.stores.r, sid, Stage.INIT, 30)  # planned beat: 10 s away
    assert slow.acquire()
    time.sleep(0.1)
    same = StageLease(d.stores.r, sid, Stage.RUN, 30)
    short = StageLease(d.stores.r, sid, Stage.POSTRUN, 0.3)  # needs a beat within 0.1 s
    assert same.acquire() and short.acquire()
    try:
        time.sleep(1.2)  # four times the short one's TTL
        assert held(d.stores.r, sid, Stage.POSTRUN) and not short.lost.is_set()
        assert held(d.stores.r, sid, Stage.INIT) and held(d.stores.r, sid, Stage.RUN)
    finally:
        for lease in (slow, same, short):
            lease.release()


@pytest.fixture
def quick(r, redis_url, tmp_path):
    """Deps whose stage leases lapse in half a second."""
    return make_deps(Settings(home=tmp_path, redis_url=redis_url, stage_lease_seconds=0.5, lease_take_grace_seconds=0))


def _result_put(sid: str, value: bytes):
    from pipeline.stores.stage_runs import Handoff

    return Handoff(Stage.CALLBACK, fields={"evaluate_ended_at": time.time()}, puts=((keys.session_result(sid), value, 60),))


def _stalled_copy(d, sid: str, then, stage: Stage = Stage.EVALUATE):
    """Copy A of ``stage`` starts and stalls (its heartbeat stops, as a stopped process's does)
    until ``resume`` is set, then ends with ``then(lease)``; returns once A's lease lapsed and the
    reaper sent the stage again: (A's thread, ``resume``, the outcomes by copy)."""
    import threading

    from workers.stages import reaper

    stalled, resume = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def stale_body(dd, state, lease):
        lease.stop_heartbeat()
        stalled.set()
        assert resume.wait(10)
        return then(lease)

    a = threading.Thread(target=lambda: outcome.update(a=run_stage(stage, sid, stale_body, d=d)))
    a.start()
    assert stalled.wait(5)
    wait_for(lambda: not held(d.stores.r, sid, stage), timeout=5, interval=0.05)
    d.stores.r.delete(keys.REAPER_LOCK)
    assert reaper.reap_once(d) == [(sid, stage)]  # sent again
    return a, resume, outcome


def test_a_copy_that_stalled_past_its_lease_writes_nothing_once_another_took_over(quick, sid):
    """A stopped worker (SIGSTOP, a starved VM) resumes after the reaper sent its stage again and
    another copy took it: whichever ends first, only the copy holding the lease writes its output,
    its done marker and the next stage's message; the stale one steps aside ("lease-lost")."""
    import threading

    from pipeline.stores import stage_metrics

    d = quick
    walk_to(d, sid, S.EVALUATING)
    in_b, finish_b = threading.Event(), threading.Event()

    def fresh_body(dd, state, lease):
        in_b.set()
        assert finish_b.wait(10)
        return _result_put(sid, b"fresh")

    a, resume, outcome = _stalled_copy(d, sid, lambda lease: _result_put(sid, b"stale"))
    b = threading.Thread(target=lambda: outcome.update(b=run_stage(Stage.EVALUATE, sid, fresh_body, d=d)))
    b.start()
    assert in_b.wait(5)  # ... and taken by another copy, which is still grading
    resume.set()
    a.join(10)
    assert outcome["a"] == "lease-lost"
    assert d.stores.r.get(keys.session_result(sid)) is None and queued(d, Stage.CALLBACK) == 0  # nothing of A's
    assert not [k for k in d.stores.r.scan_iter(f"{keys.session_result(sid)}:staged:*")]
    finish_b.set()
    b.join(10)
    assert outcome["b"] == "done" and d.stores.r.get(keys.session_result(sid)) == b"fresh"
    assert queued(d, Stage.CALLBACK) == 1 and Stage.EVALUATE in d.stores.sessions.get(sid).done
    assert stage_metrics.snapshot(d.stores.r)["runs"]["evaluate"]["lease-lost"] == 1


def test_confirm_raises_only_when_the_lease_was_taken_over(quick, sid):
    from pipeline.errors import LeaseLost
    from pipeline.stores.leases import take_expired

    d = quick
    lease = StageLease(d.stores.r, sid, Stage.EVALUATE, 0.3)
    assert lease.acquire()
    lease.confirm()  # held: fine
    lease.stop_heartbeat()
    wait_for(lambda: not held(d.stores.r, sid, Stage.EVALUATE), timeout=5, interval=0.05)
    lease.confirm()  # lapsed, nobody took it: taken back
    assert held(d.stores.r, sid, Stage.EVALUATE)
    lease.stop_heartbeat()
    wait_for(lambda: not held(d.stores.r, sid, Stage.EVALUATE), timeout=5, interval=0.05)
    assert take_expired(d.stores.r) == [(sid, Stage.EVALUATE)]
    d.stores.stage_runs.send(Stage.EVALUATE, sid)  # the reaper's resend
    with pytest.raises(LeaseLost):
        lease.confirm()
    assert lease.lost.is_set()


@pytest.mark.parametrize("confirms", [True, False], ids=["confirms", "ends-at-once"])
def test_a_stalled_copy_resuming_after_the_other_finished_writes_nothing_either(quick, sid, confirms):
    """The other order: the copy that took over has finished (its lease released, the sent record
    gone) when the stalled one resumes -- its confirm and its end are refused all the same."""
    from pipeline.errors import LeaseLost

    d = quick
    walk_to(d, sid, S.EVALUATING)
    refused: dict[str, str] = {}

    def stale_end(lease):
        if confirms:
            try:
                lease.confirm()  # what EVALUATE does before tearing runtimes down
            except LeaseLost:
                refused["confirm"] = "refused"
                raise
        return _result_put(sid, b"stale")

    a, resume, outcome = _stalled_copy(d, sid, stale_end)
    assert run_stage(Stage.EVALUATE, sid, lambda *args: _result_put(sid, b"fresh"), d=d) == "done"
    resume.set()
    a.join(10)
    assert outcome == {"a": "lease-lost"} and refused == ({"confirm": "refused"} if confirms else {})
    assert d.stores.r.get(keys.session_result(sid)) == b"fresh" and queued(d, Stage.CALLBACK) == 1


def _parks_in_ready(sid: str):
    from pipeline.stores.stage_runs import Handoff

    return Handoff(Stage.RUN, S.READY, (S.INITIALIZING,), {"ready_at": time.time()}, ready_ttl=60)


def test_a_stalled_init_copy_leaves_no_ready_entry_once_its_session_was_recovered(quick, sid):
    """INIT stalls past its lease after starting the runtime; the copy the reaper sent recovers
    the session (init worker lost -> POSTRUN, its READY slot given back). When the stalled copy
    resumes, its end -- the session parked in READY -- is refused whole: no READY entry or slot is
    left to hold the buffer's room until its time to live."""
    d = quick
    assert d.stores.ready.admit(sid, d.stores.tasks.key("t"), 60)  # INIT's start: slot + INITIALIZING
    a, resume, outcome = _stalled_copy(d, sid, lambda lease: _parks_in_ready(sid), stage=Stage.INIT)
    assert run_stage(Stage.INIT, sid, init.body, init.recover, d=d) == "done"  # recovered
    assert d.stores.sessions.status(sid) == S.POSTRUN and d.stores.ready.snapshot()["reserved"] == 0
    resume.set()
    a.join(10)
    assert outcome == {"a": "lease-lost"}
    assert d.stores.ready.snapshot() == {"depth": 0, "reserved": 0, "capacity": d.stores.ready.capacity}
    assert queued(d, Stage.RUN) == 0 and d.stores.sessions.status(sid) == S.POSTRUN


def test_an_init_end_whose_move_is_refused_leaves_no_ready_entry(d, sid):
    """A session cancelled while INIT ran (its move to READY refused): nothing of the end is
    written, the READY entry included."""
    from pipeline.errors import TransitionRefused

    lease = StageLease(d.stores.r, sid, Stage.INIT, 5)
    assert lease.acquire()
    walk_to(d, sid, S.INITIALIZING)
    d.stores.sessions.transition(sid, S.POSTRUN)  # (as cancelling an initialising session does)
    with pytest.raises(TransitionRefused):
        d.stores.stage_runs.finish(lease, sid, done=Stage.INIT, handoff=_parks_in_ready(sid))
    assert d.stores.ready.snapshot()["depth"] == 0 and d.stores.ready.snapshot()["reserved"] == 0
    assert queued(d, Stage.RUN) == 0


def test_an_init_end_parks_the_session_in_ready_with_its_slot(d, sid):
    lease = StageLease(d.stores.r, sid, Stage.INIT, 5)
    assert lease.acquire()
    walk_to(d, sid, S.INITIALIZING)
    before = time.time()
    d.stores.stage_runs.finish(lease, sid, done=Stage.INIT, handoff=_parks_in_ready(sid))
    assert d.stores.r.lrange(keys.READY_LIST, 0, -1) == [sid.encode()]
    expiry = d.stores.r.zscore(keys.READY_SLOTS, sid)
    assert before + 59 < expiry < time.time() + 61
    assert d.stores.sessions.status(sid) == S.READY and queued(d, Stage.RUN) == 1


def test_early_stop_still_happens_when_the_session_that_reached_the_count_died_before_cancelling(d):
    """CALLBACK counted session A usable (the count reached early_stop_min_usable_sessions) and
    its worker died before the cancel; B is counted next (above the count), then A's redelivered
    copy: the rest is stopped all the same (it was left running: only == the count cancelled)."""
    from pipeline.schemas import TokenLogprob, Trace, Trajectory
    from workers.stages.callback import _early_stop

    request = TaskRequest.model_validate({"task_id": "es", "instruction": "x", "num_samples": 4,
                                          "early_stop_min_usable_sessions": 1, "agent": {"custom_shell": "true"}})
    a, b, *rest = [s.session_id for s in d.stores.tasks.create(request)]

    def usable(sid):
        trace = Trace(prompt_ids=[1], response_ids=[2], loss_mask=[1.0],
                      response_logprobs=[TokenLogprob(token_id=2, logprob=-0.1)], reward=1.0)
        return SessionResult(session_id=sid, task_id="es", status=S.COMPLETED, reward=1.0,
                             trajectory=Trajectory(traces=[trace]))

    d.stores.tasks.count_usable("es", a)  # A's worker dies here
    _early_stop(d, usable(b), 1)
    # (A and B never left the INIT queue in this test: stopped with the rest)
    assert [d.stores.sessions.get(sid).cancel_requested for sid in (a, b, *rest)] == [True] * 4
    assert queued(d, Stage.POSTRUN) == 4  # idle in the INIT queue: moved to POSTRUN, which tears down
