"""Property checks of the trainer side on pure functions (no Redis): GRPO advantages and the
slime / verl / SkyRL rows, over generated sessions -- multi-turn masks, drifted or parallel
chains, ERROR / TIMEOUT sessions, sessions without a model call, all-equal groups."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.schemas import SessionResult, Trajectory
from pipeline.schemas.results import TokenLogprob, Trace
from pipeline.status import SessionStatus
from pipeline.trainers import groups

REWARDS = st.floats(min_value=-10.0, max_value=10.0, allow_nan=False)


def _trace(mask: list[int], reward: float | None = None, n_prompt: int = 3, logprob: float = -0.5) -> Trace:
    ids = list(range(100, 100 + len(mask)))
    return Trace(prompt_ids=list(range(1, n_prompt + 1)), response_ids=ids, loss_mask=[float(m) for m in mask],
                 response_logprobs=[TokenLogprob(token_id=i, logprob=logprob if m else 0.0) for i, m in zip(ids, mask)],
                 finish_reason="stop", reward=reward)


def _session(sid: str, reward: float | None, traces: list[Trace], status=SessionStatus.COMPLETED,
             index: int = 0) -> SessionResult:
    r = SessionResult(session_id=sid, task_id="t", sample_index=index, status=status, reward=reward,
                      trajectory=Trajectory(traces=traces))
    r.trajectory.metadata = {"builder": "prefix_merging"}
    return r


@settings(max_examples=200, deadline=None)
@given(reward=REWARDS, n=st.integers(2, 8), zeroed=st.integers(0, 7), method=st.sampled_from(["grpo", "loo"]))
def test_a_trace_zeroed_in_a_group_of_equal_rewards_gets_a_bounded_advantage(reward, n, zeroed, method):
    """A filter (``filters.zero_unparsed``) zeroed one trace of a group whose sessions all got the
    same reward: its advantage is its distance to the group's reward (as leave-one-out gives it),
    not that distance over GRPO's epsilon (-1,000,000 for a reward of 1.0)."""
    sessions = [_session(f"s{i}", reward, [_trace([1, 0, 1], reward), _trace([1, 1], reward)], index=i)
                for i in range(n)]
    sessions[zeroed % n].trajectory.traces[1].reward = 0.0
    adv = groups.advantages(groups.Group("t", sessions, n), method)
    for (sid, i), value in adv.items():
        assert math.isfinite(value)
        expected = 0.0 - reward if (sid, i) == (f"s{zeroed % n}", 1) else 0.0
        assert value == expected if expected == 0.0 else abs(value - expected) <= 1e-9 * max(1.0, abs(reward))


@settings(max_examples=200, deadline=None)
@given(rewards=st.lists(REWARDS, min_size=1, max_size=8), method=st.sampled_from(["grpo", "loo"]))
def test_advantages_are_finite_and_an_unfiltered_group_is_bounded_by_its_size(rewards, method):
    sessions = [_session(f"s{i}", r, [_trace([1, 1, 0, 1])], index=i) for i, r in enumerate(rewards)]
    adv = groups.advantages(groups.Group("t", sessions, len(rewards)), method)
    assert len(adv) == len(rewards) and all(math.isfinite(v) for v in adv.values())
    if method == "grpo":  # a z-score over n values (population std) is at most sqrt(n - 1)
        assert all(abs(v) <= math.sqrt(max(1, len(rewards) - 1)) + 1e-6 for v in adv.values())
    if len(set(rewards)) == 1:
        assert set(adv.values()) == {0.0}
