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


def _traces(draw, n_traces: int) -> list[Trace]:
    out = []
    for _ in range(n_traces):
        # a merged trace: sampled turns (mask 1) and the prompt tokens between them (mask 0); or an
        # empty completion (no token sampled)
        turns = draw(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3)), min_size=0, max_size=3))
        mask = [m for gap, sampled in turns for m in [0] * gap + [1] * sampled][-8:]
        junk = draw(st.sampled_from([0.0, float("nan"), float("-inf")]))  # what a masked token's slot holds
        ids = list(range(100, 100 + len(mask)))
        out.append(Trace(prompt_ids=list(range(1, draw(st.integers(1, 4)) + 1)), response_ids=ids,
                         loss_mask=[float(m) for m in mask],
                         response_logprobs=[TokenLogprob(token_id=i, logprob=-0.25 if m else junk)
                                            for i, m in zip(ids, mask)],
                         finish_reason=draw(st.sampled_from(["stop", "length", None]))))
    return out


@st.composite
def sessions(draw) -> SessionResult:
    status = draw(st.sampled_from([SessionStatus.COMPLETED, SessionStatus.COMPLETED, SessionStatus.ERROR,
                                   SessionStatus.TIMEOUT, SessionStatus.CANCELLED]))
    reward = draw(st.one_of(st.none(), st.just(float("nan")), REWARDS))
    r = _session("s", reward, _traces(draw, draw(st.integers(0, 3))), status)
    if status is SessionStatus.ERROR and not r.trajectory.traces:
        r.trajectory.error = "boom"
    return r


def _rows(r: SessionResult) -> list[tuple[list[int], list[int], list[float], float]]:
    """(response ids, mask, logprobs, reward) of each adapter's row for ``r``; slime's checked whole."""
    from pipeline.trainers import skyrl, slime, verl

    s = slime.to_sample(r)
    assert s["tokens"][len(s["tokens"]) - s["response_length"]:] == s["tokens"][-s["response_length"]:]
    assert s["response_length"] >= 1 and len(s["tokens"]) > s["response_length"]
    response = s["tokens"][-s["response_length"]:]
    v = verl.to_agent_loop_output(r)
    k = skyrl.to_generator_output([r])
    return [(response, s["loss_mask"], s["rollout_log_probs"], s["reward"]),
            (v["response_ids"], v["response_mask"], v["response_logprobs"], v["reward_score"]),
            (k["response_ids"][0], k["loss_masks"][0], k["rollout_logprobs"][0], k["rewards"][0])]


@settings(max_examples=300, deadline=None)
@given(r=sessions())
def test_every_adapter_row_is_aligned_finite_and_trains_only_what_the_policy_sampled(r):
    """slime, verl and SkyRL rows of any session: a response of one token at least (an empty
    completion gave slime a response_length of 0, whose ``tokens[-0:]`` is the whole sequence),
    mask and logprobs as long as it, every logprob and reward finite (a NaN under a zero mask is
    still NaN in the trainers' ratios), nothing trained of a session not ``usable``, and what is
    trained exactly the trace's sampled tokens with their logprobs."""
    trains = groups.usable(r)
    main = None if not any(t.response_ids for t in r.trajectory.traces) else r.trajectory.traces[groups.main_trace(r)]
    for response, mask, logprobs, reward in _rows(r):
        assert len(response) >= 1 and len(mask) == len(response) == len(logprobs)
        assert all(math.isfinite(x) for x in logprobs) and math.isfinite(reward)
        if not trains:
            assert set(mask) == {0}
        else:
            assert main is not None and mask == [int(m) for m in main.loss_mask]
            assert [lp for lp, m in zip(logprobs, mask) if m] == [-0.25] * sum(mask)


def test_a_trainable_token_without_a_logprob_is_refused_by_every_adapter_and_a_masked_one_is_not():
    import pytest

    from pipeline.trainers import skyrl, slime, verl

    t = _trace([1, 0, 1])
    t.response_logprobs[2] = TokenLogprob(token_id=t.response_ids[2], logprob=float("nan"))
    ok = _session("a", 1.0, [t])
    for convert in (slime.to_sample, verl.to_agent_loop_output, lambda x: skyrl.to_generator_output([x])):
        with pytest.raises(slime.RolloutLogprobError, match="trainable tokens \\[2\\]"):
            convert(ok)
    failed = _session("b", None, [t], SessionStatus.ERROR)  # its mask is zeroed: nothing to refuse
    assert slime.to_sample(failed)["rollout_log_probs"] == [-0.5, 0.0, 0.0]
    assert verl.to_agent_loop_output(failed)["response_logprobs"] == [-0.5, 0.0, 0.0]
    assert skyrl.to_generator_output([failed])["rollout_logprobs"] == [[-0.5, 0.0, 0.0]]
