"""GRPO groups and advantages, and the slime / verl / SkyRL adapters, on session results."""

from __future__ import annotations

import math

import pytest

from pipeline.schemas import SessionResult, Trajectory
from pipeline.schemas.results import TokenLogprob, Trace
from pipeline.status import SessionStatus
from pipeline.trainers import groups, skyrl, slime, verl


def trace(n_prompt=3, mask=(1, 1, 0, 1), reward=None, finish="stop", version="3") -> Trace:
    ids = list(range(100, 100 + len(mask)))
    return Trace(prompt_ids=list(range(n_prompt)), response_ids=ids, loss_mask=[float(m) for m in mask],
                 response_logprobs=[TokenLogprob(token_id=i, logprob=-0.5 if m else 0.0) for i, m in zip(ids, mask)],
                 finish_reason=finish, reward=reward, metadata={"policy_version": version, "turns": [{}, {}]})


def result(sid, reward, status=SessionStatus.COMPLETED, traces=None, index=0) -> SessionResult:
    traces = [trace(reward=reward)] if traces is None else traces
    return SessionResult(session_id=sid, task_id="t", sample_index=index, status=status, reward=reward,
                         trajectory=Trajectory(traces=traces))


def test_grpo_and_leave_one_out_advantages_over_usable_sessions_only():
    g = groups.Group("t", [result("a", 1.0), result("b", 0.0), result("c", 1.0),
                           result("d", 0.0, SessionStatus.ERROR)], expected=4)
    assert g.stats["usable"] == 3 and g.stats["status_error"] == 1 and g.complete
    grpo = groups.advantages(g)
    mean, std = 2 / 3, math.sqrt(((1 / 3) ** 2 * 2 + (2 / 3) ** 2) / 3)
    assert grpo[("a", 0)] == pytest.approx((1 - mean) / (std + 1e-6)) and ("d", 0) not in grpo
    loo = groups.advantages(g, "loo")
    assert loo[("a", 0)] == pytest.approx(1 - 0.5) and loo[("b", 0)] == pytest.approx(0 - 1.0)


def test_a_session_split_into_traces_gives_each_trace_its_sessions_advantage():
    split = result("a", 1.0, traces=[trace(reward=1.0), trace(reward=1.0), trace(reward=1.0)])
    adv = groups.advantages(groups.Group("t", [split, result("b", 0.0)], expected=2), "loo")
    assert [adv[("a", i)] for i in range(3)] == [1.0, 1.0, 1.0] and adv[("b", 0)] == -1.0


def test_one_usable_session_or_equal_rewards_teach_nothing():
    assert groups.advantages(groups.Group("t", [result("a", 1.0)], expected=4)) == {("a", 0): 0.0}
    same = groups.advantages(groups.Group("t", [result("a", 1.0), result("b", 1.0)], expected=2))
    assert set(same.values()) == {0.0}


def test_staleness_by_the_version_that_sampled():
    r = result("a", 1.0)
    assert not groups.stale(r, current_version=4, max_lag=1) and groups.stale(r, current_version=5, max_lag=1)
    unknown = result("b", 1.0, traces=[trace(version=None)])
    assert groups.stale(unknown, current_version=0, max_lag=10)


def test_slime_samples_lengths_masks_and_status():
    r = result("a", 0.5, traces=[trace(n_prompt=4, finish="length")])
    [s] = slime.to_samples(r, group_index=7, reward_key="score")
    assert s["tokens"] == [0, 1, 2, 3, 100, 101, 102, 103] and s["response_length"] == 4
    assert s["loss_mask"] == [1, 1, 0, 1] and len(s["rollout_log_probs"]) == 4
    assert s["reward"] == {"score": 0.5} and s["status"] == "TRUNCATED" and s["group_index"] == 7
    [timeout] = slime.to_samples(result("b", 0.0, SessionStatus.TIMEOUT))
    assert timeout["status"] == "ABORTED" and set(timeout["loss_mask"]) == {0}


def test_slime_refuses_a_trainable_token_without_a_logprob():
    t = trace()
    t.response_logprobs[0] = TokenLogprob(token_id=t.response_ids[0], logprob=float("nan"))
    with pytest.raises(slime.RolloutLogprobError, match="trainable tokens \\[0\\]"):
        slime.to_samples(result("a", 1.0, traces=[t]))


def test_slime_builds_its_own_sample_class_when_given():
    class Sample:
        class Status:
            COMPLETED, TRUNCATED, ABORTED, FAILED = "c", "t", "a", "f"

            def __class_getitem__(cls, name):
                return getattr(cls, name)

        def __init__(self, **kw):
            self.__dict__.update(kw)

    [s] = slime.to_samples(result("a", 1.0), sample_cls=Sample)
    assert isinstance(s, Sample) and s.status == "c" and s.response_length == 4


def test_verl_and_skyrl_fields():
    r = result("a", 1.0, traces=[trace(), trace(mask=(0, 1))])
    outs = verl.to_agent_loop_outputs(r)
    assert [len(o["response_mask"]) for o in outs] == [4, 2] and outs[1]["response_mask"] == [0, 1]
    assert outs[0]["reward_score"] == 1.0 and outs[0]["num_turns"] == 2
    g = skyrl.to_generator_output([r, result("b", 0.0, index=1)])
    assert len(g["response_ids"]) == len(g["loss_masks"]) == len(g["rollout_logprobs"]) == 3
    assert g["trajectory_ids"][-1] == {"instance_id": "t", "repetition_id": 1}
    assert g["rollout_metrics"] == {"sessions": 2, "completed": 2, "sequences": 3}


def test_a_turn_with_call_markup_but_no_parsed_call_zeroes_its_traces_reward():
    from pipeline.trainers import filters

    good, bad = trace(reward=1.0), trace(reward=1.0)
    good.response_messages = [{"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}]}]
    bad.response_messages = [{"role": "assistant", "content": "<tool_call>{\"name\": \"bash\", \"argu"}]
    r = result("a", 1.0, traces=[good, bad])
    assert filters.zero_unparsed(r) == [1]
    assert [t.reward for t in r.trajectory.traces] == [1.0, 0.0]
