"""The state enum owns its rules."""

import pytest

from pipeline.status import TERMINAL, Outcome, SessionStatus, Stage


@pytest.mark.parametrize("terminal", sorted(TERMINAL))
def test_terminal_states_cannot_be_left(terminal):
    assert terminal.is_terminal()
    assert not any(terminal.can_become(s) for s in SessionStatus)


def test_the_happy_path_is_allowed_and_skips_are_not():
    path = ["REGISTERED", "INITIALIZING", "READY", "RUNNING", "POSTRUN", "EVALUATING", "COMPLETED"]
    for a, b in zip(path, path[1:]):
        assert SessionStatus(a).can_become(SessionStatus(b))
    assert not SessionStatus.REGISTERED.can_become(SessionStatus.RUNNING)
    assert not SessionStatus.RUNNING.can_become(SessionStatus.COMPLETED)  # must pass postrun
    assert not SessionStatus.EVALUATING.can_become(SessionStatus.RUNNING)


def test_every_live_state_can_reach_postrun_for_teardown():
    for s in (SessionStatus.REGISTERED, SessionStatus.INITIALIZING, SessionStatus.READY, SessionStatus.RUNNING):
        assert s.can_become(SessionStatus.POSTRUN)


def test_outcomes_map_to_terminal_statuses():
    assert {o.terminal_status() for o in Outcome} == set(TERMINAL)


def test_stages_chain_in_order():
    assert [s.value for s in Stage] == ["init", "run", "postrun", "evaluate", "callback"]
    assert Stage.INIT.next() is Stage.RUN and Stage.CALLBACK.next() is None
    assert Stage.RUN.task_name == "polar.stage.run" and Stage.RUN.queue == "run"
