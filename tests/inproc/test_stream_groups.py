"""trainers.stream_groups.iter_groups over a real Redis stream and the in-process API: when a
group's entries are acked, and what survives a consumer restart; and the client's wait()."""

from __future__ import annotations

import logging
import time

import httpx
import pytest

from pipeline import keys
from pipeline.api.app import create_app
from pipeline.client import RolloutClient
from pipeline.schemas import SessionResult, TokenLogprob, Trace, Trajectory
from pipeline.schemas.results import SessionTiming
from pipeline.settings import Settings
from pipeline.status import SessionStatus
from pipeline.stores.results_stream import ResultsStream
from pipeline.trainers.stream_groups import iter_groups


@pytest.fixture
def client(r, redis_url, tmp_path):
    api = create_app(Settings(home=tmp_path, redis_url=redis_url))
    return RolloutClient("http://localhost", redis_url=redis_url, transport=httpx.WSGITransport(app=api))


def submit(client, task_id: str, n: int, **extra) -> str:
    return client.submit({"task_id": task_id, "instruction": "x", "num_samples": n,
                          "agent": {"custom_shell": "true"}, **extra})


def publish(r, task_id: str, *sids: str, reward: float = 1.0, registered_at: float | None = None) -> None:
    for sid in sids:
        trace = Trace(prompt_ids=[1, 2], response_ids=[3], loss_mask=[1.0],
                      response_logprobs=[TokenLogprob(token_id=3, logprob=-0.5)], reward=reward)
        ResultsStream(r).publish_once(SessionResult(session_id=sid, task_id=task_id, status=SessionStatus.COMPLETED,
                                                    reward=reward, trajectory=Trajectory(traces=[trace]),
                                                    timing=SessionTiming(registered_at=registered_at)))


def groups(client, **kw):
    return iter_groups(client, group="g", consumer="c", block_ms=50, stop_after=0.3, **kw)


def test_a_loop_that_breaks_keeps_the_group_it_acked_and_gets_back_the_one_it_did_not(client, r):
    """``for g in iter_groups(...): batch.append(g); g.ack(); if full: break`` -- the batching
    loop: a group acked before the break is not delivered again; without the ack (or when the
    step raises) it is, on the next run."""
    submit(client, "t1", 2)
    submit(client, "t2", 2)
    submit(client, "t3", 1)
    publish(r, "t1", "a0", "a1")
    publish(r, "t2", "b0", "b1")
    publish(r, "t3", "c0")
    batch = []
    for g in groups(client):
        batch.append(g.task_id)
        g.ack()
        if len(batch) == 2:
            break
    assert batch == ["t1", "t2"] and r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 1  # (t3's, read ahead)
    with pytest.raises(RuntimeError):
        for g in groups(client):
            raise RuntimeError("the training step failed")  # (t3, not acked)
    assert [g.task_id for g in groups(client)] == ["t3"]  # the next run: only the one not taken


def test_a_group_whose_session_was_dead_lettered_comes_without_it(client, r):
    """A session's entry that cannot be decoded goes to the dead-letter stream: its group came
    never (the loop waited for it until ``stop_after``, for ever by default); now it comes with
    the sessions that did, not complete, and is acked like any other."""
    submit(client, "t", 3)
    publish(r, "t", "a0")
    r.xadd(keys.RESULTS_STREAM, {"data": b"not a result", "session_id": "a1", "task_id": "t"})
    publish(r, "t", "a2")
    submit(client, "u", 1)
    r.xadd(keys.RESULTS_STREAM, {"data": b"nor this", "session_id": "b0", "task_id": "u"})  # (all of it lost)
    got = [(g.task_id, sorted(x.session_id for x in g.results), g.expected, g.complete) for g in groups(client)]
    assert got == [("t", ["a0", "a2"], 3, False)]
    assert r.xlen(keys.RESULTS_DEAD_LETTER) == 2 and r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0
    assert list(groups(client)) == []  # taken: not again
    submit(client, "v", 3)  # a loss counted before a restart still counts after it
    publish(r, "v", "c0")
    r.xadd(keys.RESULTS_STREAM, {"data": b"broken", "session_id": "c1", "task_id": "v"})
    assert list(groups(client)) == []  # (c2 has not come)
    publish(r, "v", "c2")
    assert [sorted(x.session_id for x in g.results) for g in groups(client)] == [["c0", "c2"]]
    assert not r.exists(keys.results_lost("g", "v"))  # closed: nothing of it kept


def test_a_404_that_is_not_the_apis_unknown_task_ends_the_loop_and_drops_nothing(client, r):
    wrong = RolloutClient("http://localhost/wrong-prefix", redis_url=client.redis_url, transport=client._http._transport)
    submit(client, "kept", 1)
    publish(r, "kept", "k0")
    with pytest.raises(Exception) as info:
        list(groups(wrong))
    assert getattr(info.value, "status", None) == 404
    assert [g.task_id for g in groups(client)] == ["kept"]  # still there


def test_a_group_closed_before_a_restart_is_not_made_again_from_late_sessions(client, r):
    """Early stop: the group closes at its first usable session; a session of the same task that
    was already past RUN completes later -- after the trainer restarted: dropped, not a second
    group of one."""
    submit(client, "es", 4, early_stop_min_usable_sessions=1)
    publish(r, "es", "e0")
    first = groups(client)
    assert [(g.task_id, len(g.results)) for g in first] == [("es", 1)]
    publish(r, "es", "e1")  # arrives while no consumer runs
    assert list(groups(client)) == []  # a new process
    assert r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0


def test_a_task_id_submitted_again_after_its_first_task_expired_is_a_new_group_not_dropped(client, r):
    """A trainer naming its tasks (``prompt-17``) submits the id again in a later epoch, once the
    first task expired from the API (its timeout and a day); the closed-task marks last a week.
    The new task's sessions are a group of their own -- they were acked and dropped without a
    word -- while a late session of the first task is still dropped."""
    submit(client, "prompt-17", 2)
    first = client.status("prompt-17", results=False).created_at - 2 * 24 * 3600  # (as if two days ago)
    r.hset(keys.task("prompt-17"), "created_at", repr(first))
    publish(r, "prompt-17", "a0", "a1", registered_at=first)
    assert [(g.task_id, len(g.results)) for g in groups(client)] == [("prompt-17", 2)]
    r.delete(keys.task("prompt-17"), keys.task_sessions("prompt-17"))  # expired
    submit(client, "prompt-17", 2)
    again = client.status("prompt-17", results=False).created_at
    publish(r, "prompt-17", "a2", registered_at=first)  # the first task's straggler, after a restart: dropped
    publish(r, "prompt-17", "b0", "b1", registered_at=again)
    assert [sorted(x.session_id for x in g.results) for g in groups(client)] == [["b0", "b1"]]
    publish(r, "prompt-17", "b2", registered_at=again)  # ... and the new task's own late session is dropped too
    assert list(groups(client)) == [] and r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0


def test_results_of_a_task_the_api_no_longer_knows_are_dropped_not_fatal(client, r, caplog):
    submit(client, "known", 1)
    publish(r, "expired", "x0")
    publish(r, "known", "k0")
    with caplog.at_level(logging.WARNING, logger="polar.trainers"):
        assert [g.task_id for g in groups(client)] == ["known"]
    assert "task expired is unknown to the API" in caplog.text
    assert r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0


def test_stopping_with_an_incomplete_group_says_so_and_keeps_it_unacked(client, r, caplog):
    submit(client, "part", 3)
    publish(r, "part", "p0", "p1")
    with caplog.at_level(logging.WARNING, logger="polar.trainers"):
        assert list(groups(client)) == []
    assert "'part': '2/3'" in caplog.text
    assert r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 2  # delivered again to this consumer


def test_wait_gives_up_at_its_timeout_not_a_poll_later(client):
    import time

    submit(client, "slowpoke", 1)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        client.wait("slowpoke", timeout=0.3, poll_seconds=30)
    assert time.monotonic() - t0 < 10  # the old loop slept a whole poll (30 s) past its timeout


class Restarting(httpx.BaseTransport):
    """The API as a trainer sees it while it restarts: refused connections, then a 503 from the
    load balancer, then the API itself."""

    def __init__(self, api: httpx.BaseTransport) -> None:
        self.api, self.faults = api, ["refused", "refused", 503]

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.faults:
            fault = self.faults.pop(0)
            if fault == "refused":
                raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
            return httpx.Response(fault, json={"error": {"message": "no healthy upstream"}})
        return self.api.handle_request(request)


def test_an_api_restart_while_a_groups_size_is_asked_is_waited_out_not_fatal(client, r, monkeypatch, caplog):
    monkeypatch.setattr("pipeline.trainers.stream_groups.API_RETRY_FIRST_SECONDS", 0.01)
    restarting = Restarting(client._http._transport)
    flaky = RolloutClient("http://localhost", redis_url=client.redis_url, transport=restarting)
    submit(client, "through", 2)
    publish(r, "through", "t0", "t1")
    with caplog.at_level(logging.WARNING, logger="polar.trainers"):
        assert [(g.task_id, len(g.results)) for g in groups(flaky)] == [("through", 2)]
    assert not restarting.faults and caplog.text.count("retrying in") == 3 and "HTTP 503" in caplog.text
    assert r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0
    rude = RolloutClient("http://localhost", redis_url=client.redis_url, transport=httpx.MockTransport(
        lambda request: httpx.Response(401, json={"error": {"message": "bad token"}})))
    submit(client, "refused", 1)
    publish(r, "refused", "f0")
    with pytest.raises(Exception) as info:  # a 4xx other than "unknown task" is no outage: it ends the loop
        list(iter_groups(rude, group="g2", consumer="c", block_ms=50, stop_after=0.3))
    assert getattr(info.value, "status", None) == 401


def test_wait_polls_through_an_api_restart_and_still_raises_what_is_no_outage(client, caplog):
    submit(client, "waited", 1)  # (never run here: it stays REGISTERED)
    restarting = Restarting(client._http._transport)
    flaky = RolloutClient("http://localhost", redis_url=client.redis_url, transport=restarting)
    with caplog.at_level(logging.WARNING, logger="polar.client"), pytest.raises(TimeoutError) as info:
        flaky.wait("waited", timeout=0.5, poll_seconds=0.01)
    assert not restarting.faults and caplog.text.count("the API is unavailable") == 3  # refused x2, 503: polled on
    assert "REGISTERED" in str(info.value)  # the task's last counts, read after the outage
    with pytest.raises(Exception) as unknown:  # a 4xx is no outage
        flaky.wait("never-submitted", timeout=5, poll_seconds=0.01)
    assert getattr(unknown.value, "status", None) == 404


def test_polar_submit_wait_follows_through_an_api_restart(client):
    from infra.cli.render import follow

    submit(client, "followed", 1)
    restarting = Restarting(client._http._transport)
    flaky = RolloutClient("http://localhost", redis_url=client.redis_url, transport=restarting)
    with pytest.raises(TimeoutError):  # (it raised the ConnectError of the first poll)
        follow(flaky, "followed", timeout=0.5, poll_seconds=0.01, tables=False)
    assert not restarting.faults


def test_restarts_while_a_group_fills_never_dead_letter_its_first_sessions(client, r):
    """A trainer restarted more often than ``max_deliveries`` while one session of a group is
    still running: the sessions it held were kept, not worked on, so they are not dead-lettered,
    and the group comes whole once the slow session arrives."""
    client.max_deliveries = 2
    submit(client, "slow", 3)
    publish(r, "slow", "s0", "s1")
    for _ in range(5):  # each run holds s0 and s1, stops (a restart), and they come again
        assert list(groups(client)) == []
    assert r.xlen(keys.RESULTS_DEAD_LETTER) == 0
    publish(r, "slow", "s2")
    got = list(groups(client))
    assert [sorted(x.session_id for x in g.results) for g in got] == [["s0", "s1", "s2"]]
    assert r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0


def test_a_group_whose_step_keeps_failing_is_still_dead_lettered(client, r):
    """The hold is no escape from ``max_deliveries``: a group whose training step raises every
    time is yielded until its last session exceeds it, then that session is dead-lettered."""
    client.max_deliveries = 2
    submit(client, "poison", 2)
    publish(r, "poison", "p0", "p1")
    yielded = 0
    for _ in range(6):
        try:
            for _g in groups(client):
                yielded += 1
                raise RuntimeError("the training step fails")
        except RuntimeError:
            pass
    # Twice whole, then p1 was dead-lettered (p0, held while it waited for p1, was not counted):
    # the group came without p1 -- also after each restart -- until p0 had its two deliveries too.
    assert yielded == 5
    dead = r.xrange(keys.RESULTS_DEAD_LETTER)
    assert len(dead) == 2 and all(b"max_deliveries=2" in d[1][b"reason"] for d in dead)
    assert list(groups(client)) == [] and r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0


def test_a_second_consumer_in_the_consumer_group_is_reported_not_waited_on_silently(client, r, caplog):
    """Two trainer processes in one consumer group split a task's sessions: neither closes the
    group (nor yields it partial, nor twice), and without stop_after both waited for ever without
    a word. Each new task now checks for another live consumer and says so."""
    submit(client, "t", 2)
    publish(r, "t", "a0")
    other = client.results(group="g", consumer="rank1", block_ms=50)
    assert next(other).result.session_id == "a0"  # rank1 holds one of t's two sessions
    deadline = time.monotonic() + 10
    while not r.exists(keys.results_alive("g", "rank1")) and time.monotonic() < deadline:
        time.sleep(0.01)  # (its first beat comes from a thread of its own)
    publish(r, "t", "a1")
    with caplog.at_level(logging.ERROR, logger="polar.trainers"):
        assert list(iter_groups(client, group="g", consumer="rank0", block_ms=50, stop_after=0.3)) == []
    assert "consumer group g is also read by ['rank1']" in caplog.text
    other.close()  # (its beat ends: its entry is rank0's once idle)


def test_a_group_whose_first_sessions_were_trimmed_before_the_consumer_group_existed_comes_whole(client, r, caplog):
    """The trainer's consumer group was made after the stream had been trimmed (a trainer started
    late, or under a new group name, with the stream at its cap): a task's first sessions were
    in the trimmed entries. Its group waited for them for ever -- the later sessions held
    unacked, which also kept every later entry from being trimmed. Now those sessions come from
    the API (which has every session's result), and the group comes whole, once."""
    from pipeline.stores.outputs import OutputStore

    submit(client, "late", 3)
    sids = [s.session_id for s in sorted(client.status("late", results=False).sessions, key=lambda s: s.sample_index)]
    outputs, stream = OutputStore(r, 3600), ResultsStream(r)
    for i, sid in enumerate(sids):  # the sessions end: their results stored and published
        trace = Trace(prompt_ids=[1, 2], response_ids=[3], loss_mask=[1.0],
                      response_logprobs=[TokenLogprob(token_id=3, logprob=-0.5)], reward=float(i))
        result = SessionResult(session_id=sid, task_id="late", sample_index=i, status=SessionStatus.COMPLETED,
                               reward=float(i), trajectory=Trajectory(traces=[trace]))
        outputs.save_result(sid, result)
        stream.publish_once(result)
    second = r.xrange(keys.RESULTS_STREAM)[1][0]
    r.xtrim(keys.RESULTS_STREAM, minid=second, approximate=False)  # the first entry trimmed, as a publisher does with no group yet
    with caplog.at_level(logging.WARNING, logger="polar.trainers"):
        got = [(g.task_id, sorted(x.session_id for x in g.results), g.complete) for g in groups(client)]
    assert got == [("late", sorted(sids), True)] and "trimmed from the results stream" in caplog.text
    assert client.missed_entries("g") == 1 and r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0
    assert list(groups(client)) == []  # taken: not again
