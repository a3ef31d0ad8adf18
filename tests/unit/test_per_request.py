"""per_request: one trace per completion, ids and logprobs copied exactly as sampled."""

import pytest

from pipeline import builders
from pipeline.builders import BuildContext, BuildError
from pipeline.schemas import CompletionRecord


def record(i, prompt, resp, start):
    return CompletionRecord(
        completion_id=f"c{i}", session_id="s", seq=i, provider="openai_chat", started_at=start,
        finished_at=start + 1, upstream_latency_ms=1.0, prompt_ids=prompt, response_ids=resp,
        response_logprobs=[-0.1 * (k + 1) for k in range(len(resp))], response_tokens=[f"t{t}" for t in resp],
        finish_reason="stop", response_message={"role": "assistant", "content": "x"},
        normalized_request={"messages": [{"role": "user", "content": str(i)}], "tools": [{"type": "function"}]},
        policy_version="7")


def test_one_trace_per_completion_in_time_order():
    recs = [record(1, [1, 2, 3], [4, 5], 20.0), record(0, [1, 2], [9], 10.0)]
    ctx = BuildContext("s", "t", "shell", {"group_id": "g", "rollout_step": 3, "other": 1})
    traj = builders.create("per_request").build(recs, ctx)
    assert [t.metadata["completion_id"] for t in traj.traces] == ["c0", "c1"]
    t = traj.traces[1]
    assert t.prompt_ids == [1, 2, 3] and t.response_ids == [4, 5] and t.loss_mask == [1.0, 1.0]
    assert [lp.logprob for lp in t.response_logprobs] == [-0.1, -0.2]
    assert [lp.token for lp in t.response_logprobs] == ["t4", "t5"]
    assert t.prompt_messages == [{"role": "user", "content": "1"}]
    assert t.metadata["group_id"] == "g" and t.metadata["rollout_step"] == 3 and "other" not in t.metadata
    assert t.metadata["policy_version"] == "7" and t.metadata["builder"] == "per_request"


def test_registry_errors_are_build_errors():
    with pytest.raises(BuildError, match="not available"):
        builders.create("nope")
    with pytest.raises(BuildError, match="bad config"):
        builders.create("per_request", {"x": 1})
    with pytest.raises(BuildError, match="not allowed"):
        builders.create("no.such.module:Builder")
