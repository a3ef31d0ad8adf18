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


def merged(sid, reward, status=SessionStatus.COMPLETED, traces=None, index=0) -> SessionResult:
    r = result(sid, reward, status, traces, index)
    r.trajectory.metadata = {"builder": "prefix_merging"}
    return r


def test_verl_gets_one_output_per_session_its_main_trace():
    title, main = trace(mask=(1, 1)), trace(mask=(1, 0, 1, 1, 1))  # opencode: a title call apart
    main.prompt_messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    main.response_messages = [{"role": "assistant", "content": "a"}, {"role": "tool", "content": "t"},
                              {"role": "assistant", "content": "b"}]
    out = verl.to_agent_loop_output(merged("a", 1.0, traces=[title, main]))
    assert out["response_mask"] == [1, 0, 1, 1, 1] and out["reward_score"] == 1.0 and out["num_turns"] == 4
    assert out["extra_fields"]["trace_index"] == 1 and out["extra_fields"]["traces_left_out"] == 1
    every = verl.to_agent_loop_outputs(merged("a", 1.0, traces=[title, main]))
    assert [len(o["response_mask"]) for o in every] == [2, 5]


def test_verl_cuts_the_response_to_its_length_and_trains_nothing_of_an_overlong_prompt():
    out = verl.to_agent_loop_output(merged("a", 1.0, traces=[trace(n_prompt=3)]), response_length=2)
    assert out["response_ids"] == [100, 101] and out["response_mask"] == [1, 1] and len(out["response_logprobs"]) == 2
    long = verl.to_agent_loop_output(merged("a", 1.0, traces=[trace(n_prompt=9)]), prompt_length=4)
    assert long["prompt_ids"] == [5, 6, 7, 8] and set(long["response_mask"]) == {0} and long["reward_score"] == 0.0


def test_skyrl_cuts_each_sequence_to_the_trainers_lengths_as_verl_does():
    a = merged("a", 1.0, traces=[trace(n_prompt=3)])
    long = merged("b", 0.0, index=1, traces=[trace(n_prompt=9)])
    g = skyrl.to_generator_output([a, long], prompt_length=4, response_length=2)
    assert g["response_ids"] == [[100, 101], [100, 101]] and g["loss_masks"][0] == [1, 1]
    assert [len(x) for x in g["rollout_logprobs"]] == [2, 2] and g["stop_reasons"] == ["length", "length"]
    # the overlong prompt keeps its last tokens, trains nothing and takes the group's neutral reward
    assert g["prompt_token_ids"] == [[0, 1, 2], [5, 6, 7, 8]] and set(g["loss_masks"][1]) == {0}
    assert g["rewards"] == [1.0, 0.5]
    assert g["rollout_metrics"]["responses_cut"] == 2 and g["rollout_metrics"]["overlong_prompts"] == 1
    same = skyrl.to_generator_output([a, long])  # no lengths: nothing cut
    assert [len(x) for x in same["response_ids"]] == [4, 4] and same["rewards"] == [1.0, 0.0]
    assert same["stop_reasons"] == ["stop", "stop"] and same["rollout_metrics"]["responses_cut"] == 0
    out = verl.to_agent_loop_output(long, prompt_length=4, response_length=2, fill_reward=0.5)
    assert out["prompt_ids"] == g["prompt_token_ids"][1] and out["response_mask"] == g["loss_masks"][1]
    assert out["reward_score"] == 0.5 and out["extra_fields"]["response_cut"]


@pytest.mark.parametrize("status, reward", [(SessionStatus.ERROR, 1.0), (SessionStatus.TIMEOUT, 1.0),
                                            (SessionStatus.CANCELLED, None), (SessionStatus.COMPLETED, None),
                                            (SessionStatus.COMPLETED, float("nan"))])
def test_a_session_not_to_learn_from_keeps_its_row_with_no_mask_and_a_zero_reward(status, reward):
    r = merged("a", reward, status, traces=[trace(reward=reward)])
    out = verl.to_agent_loop_output(r)
    assert set(out["response_mask"]) == {0} and out["reward_score"] == 0.0 and not out["extra_fields"]["trained"]
    g = skyrl.to_generator_output([r])
    assert g["rewards"] == [0.0] and set(g["loss_masks"][0]) == {0}
    s = slime.to_sample(r, reward_key=None)
    assert s["reward"] == 0.0 and set(s["loss_mask"]) == {0}


def test_a_per_request_session_of_several_calls_is_no_one_sequence():
    r = result("a", 1.0, traces=[trace(), trace()])
    r.trajectory.metadata = {"builder": "per_request"}
    for convert in (verl.to_agent_loop_output, slime.to_sample, lambda x: skyrl.to_generator_output([x])):
        with pytest.raises(groups.NoSingleSequence, match="prefix_merging"):
            convert(r)
    steps = skyrl.to_generator_output([r], step_wise=True)  # SkyRL's step-wise mode takes them
    assert steps["is_last_step"] == [False, True] and steps["rewards"] == [0.0, 1.0]


def test_skyrl_one_sequence_per_session_in_order_with_trajectory_ids():
    a = merged("a", 1.0, traces=[trace(mask=(1, 1)), trace()])
    g = skyrl.to_generator_output([a, merged("b", 0.0, index=1)])
    assert len(g["response_ids"]) == len(g["loss_masks"]) == len(g["rollout_logprobs"]) == 2
    assert [len(m) for m in g["loss_masks"]] == [4, 4] and g["rewards"] == [1.0, 0.0]
    assert g["trajectory_ids"][-1] == {"instance_id": "t", "repetition_id": 1} and g["is_last_step"] == [True, True]
    assert g["rollout_metrics"] == {"sessions": 2, "completed": 2, "trained": 2, "sequences": 2,
                                    "inexact_context_traces": 0, "responses_cut": 0, "overlong_prompts": 0}


def test_a_merged_trace_whose_context_drifted_is_flagged_to_every_trainer():
    t = trace()
    t.metadata["context_exact"] = False
    r = merged("a", 1.0, traces=[t])
    assert verl.to_agent_loop_output(r)["extra_fields"]["context_exact"] is False
    assert slime.to_sample(r)["metadata"]["polar"]["context_exact"] is False
    assert skyrl.to_generator_output([r])["rollout_metrics"]["inexact_context_traces"] == 1


def test_slime_one_sample_per_session_and_a_failed_placeholder_without_calls():
    s = slime.to_sample(merged("a", 0.5, traces=[trace(mask=(1,)), trace()], index=3), group_index=1)
    assert s["response_length"] == 4 and s["index"] == 3 and s["reward"] == 0.5 and s["group_index"] == 1
    assert s["remove_sample"] is False
    none = slime.to_sample(merged("b", None, SessionStatus.ERROR, traces=[], index=2), reward_key="score")
    assert none["status"] == "FAILED" and none["reward"] == {"score": 0.0} and none["index"] == 2
    # a row slime can pack: tokens = prompt + response, one masked response token with its logprob
    assert len(none["tokens"]) == 2 and none["response_length"] == 1 and none["loss_mask"] == [0]
    assert len(none["rollout_log_probs"]) == 1 and none["remove_sample"] is True
    assert slime.to_sample(result("c", 1.0, SessionStatus.TIMEOUT))["remove_sample"] is True


def test_a_session_without_a_model_call_keeps_its_row_in_verl_and_skyrl():
    """Its runtime failed to start, or its agent crashed before calling: one such session in a
    group used to raise in every adapter and stop the training step."""
    none = merged("n", None, SessionStatus.ERROR, traces=[], index=1)
    out = verl.to_agent_loop_output(none, prompt_length=8, response_length=8)
    assert out["response_mask"] == [0] and len(out["response_ids"]) == len(out["response_logprobs"]) == 1
    assert out["prompt_ids"] and out["reward_score"] == 0.0 and out["extra_fields"]["no_model_call"] is True
    g = skyrl.to_generator_output([merged("a", 1.0), none])
    assert len(g["response_ids"]) == len(g["prompt_token_ids"]) == 2 and g["loss_masks"][1] == [0]
    # (its reward: the group's usable mean, groups.neutral_reward)
    assert g["rewards"] == [1.0, 1.0] and g["is_last_step"] == [True, True] and g["stop_reasons"][1] == "error"
    assert g["trajectory_ids"][1] == {"instance_id": "t", "repetition_id": 1}
    assert all(len(r) == len(m) == len(lp) for r, m, lp in zip(g["response_ids"], g["loss_masks"], g["rollout_logprobs"]))
    assert skyrl.to_generator_output([none], step_wise=True)["loss_masks"] == [[0]]


def _grpo(rewards):
    """What slime's, verl's and SkyRL's GRPO make of one group's rows: (r - mean) / (std + eps), the
    unbiased std (torch.std), over every row of the group -- the masked ones too."""
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((x - mean) ** 2 for x in rewards) / (len(rewards) - 1))
    return [(x - mean) / (std + 1e-6) for x in rewards]


def test_rows_that_train_nothing_leave_a_frameworks_group_baseline_to_the_usable_sessions():
    """An early-stopped group of eight: three sessions in (1, 0, 1), four CANCELLED by the early
    stop, one ERROR without a model call. The frameworks normalise over all eight rows: at 0.0 the
    five rows moved the baseline to 0.25, the successes' advantage became +1.62 (Polar's own: +0.71)
    and the failure's -0.54 (-1.41) -- and a group of three successes and five cancelled rows got
    +1.2 each where Polar's advantages give 0."""
    rs = [merged(f"s{i}", reward, index=i) for i, reward in enumerate([1.0, 0.0, 1.0])]
    rs += [merged(f"c{i}", None, SessionStatus.CANCELLED, traces=[trace(reward=None)], index=3 + i) for i in range(4)]
    rs += [merged("n", None, SessionStatus.ERROR, traces=[], index=7)]
    fill = groups.neutral_reward(rs)
    assert fill == pytest.approx(2 / 3)
    rows = {"skyrl": skyrl.to_generator_output(rs)["rewards"],
            "verl": [verl.to_agent_loop_output(r, fill_reward=fill)["reward_score"] for r in rs],
            "slime": [slime.to_sample(r, fill_reward=fill)["reward"] for r in rs]}
    polar = groups.advantages(groups.Group("t", rs, expected=8))
    for name, rewards in rows.items():
        assert rewards[:3] == [1.0, 0.0, 1.0] and sum(rewards) / 8 == pytest.approx(2 / 3), name
        trained = _grpo(rewards)[:3]  # the masked rows' advantages train nothing
        assert sum(trained) == pytest.approx(0.0, abs=1e-6), name  # the usable sessions' own baseline
        assert trained[0] > 0 > trained[1], name  # signs as Polar's
        assert [a / trained[0] for a in trained] == pytest.approx([polar[(f"s{i}", 0)] / polar[("s0", 0)]
                                                                   for i in range(3)]), name
    successes = [merged(f"s{i}", 1.0, index=i) for i in range(3)]
    successes += [merged(f"c{i}", None, SessionStatus.CANCELLED, traces=[trace(reward=None)], index=3 + i)
                  for i in range(5)]
    assert set(_grpo(skyrl.to_generator_output(successes)["rewards"])) == {0.0}  # nothing to learn, as Polar's
    assert skyrl.to_generator_output(successes, neutral_fill=False)["rewards"][3:] == [0.0] * 5


def test_staleness_counts_the_oldest_version_that_sampled_a_session():
    t = trace(version="5")
    t.metadata["policy_versions"] = ["3", "5"]  # merged across a weight swap
    r = result("a", 1.0, traces=[t])
    assert groups.policy_version(r) == 3 and groups.stale(r, current_version=5, max_lag=1)
    split = result("b", 1.0, traces=[trace(version="4"), trace(version="6")])
    assert groups.policy_version(split) == 4


def test_only_ascii_digits_name_an_integer_version_as_the_proxy_reads_them():
    """The resume check compares versions of ASCII digits only; staleness reads the same ones
    (int() would read "1_0" as 10 and " 7" as 7: a session called fresh that the proxy never
    ordered)."""
    for odd in ("1_0", " 7", "7 ", "\u0663", "+7", "-1", True, 7.5):
        assert groups.policy_version(result("a", 1.0, traces=[trace(version=odd)])) is None, odd
    for plain, value in (("10", 10), (10, 10), ("007", 7)):
        assert groups.policy_version(result("a", 1.0, traces=[trace(version=plain)])) == value


def test_a_trace_zeroed_by_a_filter_is_advantaged_as_its_own_reward():
    a = result("a", 1.0, traces=[trace(reward=1.0), trace(reward=0.0)])  # its second trace: an unparsed call
    adv = groups.advantages(groups.Group("t", [a, result("b", 0.0)], expected=2), "loo")
    assert adv[("a", 0)] == 1.0 and adv[("a", 1)] == 0.0 and adv[("b", 0)] == -1.0
    grpo = groups.advantages(groups.Group("t", [a, result("b", 0.0)], expected=2))
    assert grpo[("a", 0)] > 0 and grpo[("a", 1)] == pytest.approx(grpo[("b", 0)])


def test_a_turn_with_call_markup_but_no_parsed_call_zeroes_its_traces_reward():
    from pipeline.trainers import filters

    good, bad = trace(reward=1.0), trace(reward=1.0)
    good.response_messages = [{"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}]}]
    bad.response_messages = [{"role": "assistant", "content": "<tool_call>{\"name\": \"bash\", \"argu"}]
    r = result("a", 1.0, traces=[good, bad])
    assert filters.zero_unparsed(r) == [1]
    assert [t.reward for t in r.trajectory.traces] == [1.0, 0.0]


def test_every_adapter_carries_who_sampled_each_sample():
    """An off-policy or asynchronous trainer filters or corrects per sample after conversion: the
    oldest version that sampled the session, and the trace's own versions, travel with it."""
    swapped = trace()
    swapped.metadata["policy_versions"] = ["3", "4"]  # a merged trace sampled across a weight swap
    r = merged("a", 1.0, traces=[swapped])
    s = slime.to_sample(r)["metadata"]["polar"]
    v = verl.to_agent_loop_output(r)["extra_fields"]
    assert (s["policy_version"], s["policy_versions"]) == (v["policy_version"], v["policy_versions"]) == (3, ["3", "4"])
    assert skyrl.to_generator_output([r, merged("b", 0.0, index=1)])["policy_versions"] == [["3", "4"], ["3"]]


def test_the_neutral_reward_is_the_mean_of_what_the_usable_rows_are_handed():
    """A filter set the main trace's own reward (0.0 for an unparsed last call): that is the row's
    reward, so the fill is the mean of those, not of the sessions' rewards."""
    filtered = result("a", 1.0, traces=[trace(reward=0.0)])
    plain = result("b", 1.0)
    failed = result("c", 0.0, SessionStatus.ERROR)
    assert groups.neutral_reward([filtered, plain, failed]) == 0.5
