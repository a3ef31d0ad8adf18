"""Session state in a real Redis: the status rules hold at the write path, also under races."""

import threading

import pytest

from pipeline.errors import TransitionRefused
from pipeline.schemas import SessionSpec, TaskRequest
from pipeline.status import Outcome
from pipeline.status import SessionStatus as S
from pipeline.stores.sessions import SessionStore


def spec():
    task = TaskRequest.model_validate({"instruction": "x", "agent": {"custom_shell": "true"}})
    return SessionSpec.expand(task)[0]


def test_register_and_walk_the_lifecycle(r):
    store = SessionStore(r)
    sp = spec()
    store.register(sp)
    assert store.get(sp.session_id).status == S.REGISTERED
    for target in (S.INITIALIZING, S.READY, S.RUNNING, S.POSTRUN, S.EVALUATING, S.COMPLETED):
        store.transition(sp.session_id, target)
    state = store.get(sp.session_id)
    assert state.status == S.COMPLETED and state.spec == sp


def test_terminal_state_is_final_and_skips_are_refused(r):
    store = SessionStore(r)
    sp = spec()
    store.register(sp)
    with pytest.raises(TransitionRefused):
        store.transition(sp.session_id, S.RUNNING)  # REGISTERED -> RUNNING skips stages
    store.transition(sp.session_id, S.POSTRUN)
    store.transition(sp.session_id, S.EVALUATING)
    store.transition(sp.session_id, S.CANCELLED)
    for target in S:
        with pytest.raises(TransitionRefused) as info:
            store.transition(sp.session_id, target)
        assert info.value.current == "CANCELLED"
    assert store.status(sp.session_id) == S.CANCELLED


def test_expected_state_guards_against_races(r):
    store = SessionStore(r)
    sp = spec()
    store.register(sp)
    wins = []

    def contender():
        try:
            store.transition(sp.session_id, S.INITIALIZING, expected=[S.REGISTERED])
            wins.append(1)
        except TransitionRefused:
            pass

    threads = [threading.Thread(target=contender) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wins == [1]


def test_unknown_session_is_refused(r):
    with pytest.raises(TransitionRefused) as info:
        SessionStore(r).transition("nope", S.INITIALIZING)
    assert info.value.current is None


def test_first_outcome_wins(r):
    store = SessionStore(r)
    sp = spec()
    store.register(sp)
    assert store.set_outcome(sp.session_id, Outcome.CANCELLED, "user") == Outcome.CANCELLED
    assert store.set_outcome(sp.session_id, Outcome.TIMEOUT, "late") == Outcome.CANCELLED
    assert store.get(sp.session_id).error == "user"


def test_session_keys_share_one_cluster_slot():
    from pipeline import keys

    sid = "sess-abc"
    tags = {k.split("{")[1].split("}")[0] for k in (
        keys.session(sid), keys.session_completions(sid), keys.session_errors(sid),
        keys.session_result(sid), keys.session_published(sid), keys.session_calls(sid))}
    assert tags == {sid}
