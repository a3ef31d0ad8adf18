"""The slime rollout function against the stack, called the way slime calls it
(``generate_rollout(args, rollout_id, data_source)``), with slime's own types stood in by the
test (slime is not installed here): each prompt group becomes a task, its sessions come back as
one list of samples with tokens, masks, logprobs and rewards."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from pipeline.trainers.slime_rollout import generate_rollout
from tests.e2e.conftest import EXAMPLES


class PromptSample:  # what slime's data source hands out: a prompt (and a label), its group's index
    def __init__(self, prompt, group_index, label=None):
        self.prompt, self.group_index, self.label = prompt, group_index, label


class DataSource:
    def __init__(self, prompts, first_group=40):  # slime numbers groups across rollouts
        self.prompts, self.first_group = prompts, first_group

    def get_samples(self, n):
        return [[PromptSample(p, self.first_group + i)] for i, p in enumerate(self.prompts[:n])]


def test_generate_rollout_returns_one_sample_list_per_prompt_group(stack, tmp_path):
    template = json.loads((EXAMPLES / "demo_task.json").read_text())
    template["runtime"]["prepare"][0]["src"] = str(EXAMPLES / "bash_agent.py")
    template["builder"] = {"strategy": "prefix_merging"}  # one sample per session
    path = tmp_path / "template.json"
    path.write_text(json.dumps(template))
    args = SimpleNamespace(polar_task_template=str(path), polar_api_url=stack.settings.api_url,
                           polar_api_token=stack.settings.secret("api_token"), n_samples_per_prompt=2,
                           rollout_batch_size=2, polar_timeout=240)
    prompts = ["Create hello.txt containing 'hello world'.",
               [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Write hello.txt."}]]
    out = generate_rollout(args, rollout_id=7, data_source=DataSource(prompts))
    assert len(out["samples"]) == 2 and out["metrics"]["sessions"] == 4 and out["metrics"]["usable"] == 4
    for index, group in enumerate(out["samples"]):
        # exactly n_samples_per_prompt samples (slime reshapes rewards by it), one per session, in sample order
        assert len(group) == 2 and len({s["session_id"] for s in group}) == 2 and [s["index"] for s in group] == [0, 1]
        assert {s["group_index"] for s in group} == {40 + index}  # the data source's, not restarted per rollout
        for s in group:
            assert len(s["tokens"]) > s["response_length"] == len(s["loss_mask"]) == len(s["rollout_log_probs"])
            assert s["reward"] == 1.0 and s["status"] == "COMPLETED"  # a float: slime's default --reward-key
            assert sum(s["loss_mask"]) > 0 and s["metadata"]["polar"]["trained"]
    assert out["metrics"]["reward_mean"] == 1.0

    template["builder"] = {"strategy": "per_request"}
    path.write_text(json.dumps(template))
    with pytest.raises(ValueError, match="prefix_merging"):  # refused before a rollout is spent
        generate_rollout(args, rollout_id=8, data_source=DataSource(prompts))
    with pytest.raises(ValueError, match="eval"):  # evaluating would eat the training prompts
        generate_rollout(args, rollout_id=8, data_source=DataSource(prompts), evaluation=True)


def test_a_rollout_that_times_out_cancels_what_it_submitted(stack, tmp_path, monkeypatch):
    """The timeout is the whole rollout's, and a rollout given up leaves nothing sampling: its
    tasks were left running, taking the engine from the next rollout's."""
    import time

    from pipeline.client import RolloutClient
    from pipeline.status import TaskState

    submitted: list[str] = []
    submit = RolloutClient.submit
    monkeypatch.setattr(RolloutClient, "submit", lambda self, task: submitted.append(submit(self, task)) or submitted[-1])
    template = json.loads((EXAMPLES / "demo_task.json").read_text())
    template["runtime"]["prepare"][0]["src"] = str(EXAMPLES / "bash_agent.py")
    template["builder"] = {"strategy": "prefix_merging"}
    template["agent"] = {"custom_shell": "sleep 120"}
    path = tmp_path / "template.json"
    path.write_text(json.dumps(template))
    args = SimpleNamespace(polar_task_template=str(path), polar_api_url=stack.settings.api_url,
                           polar_api_token=stack.settings.secret("api_token"), n_samples_per_prompt=1,
                           rollout_batch_size=2, polar_timeout=3)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        generate_rollout(args, rollout_id=9, data_source=DataSource(["a", "b"]))
    assert time.monotonic() - started < 30 and len(submitted) == 2
    client = RolloutClient(stack.settings.api_url, api_token=stack.settings.secret("api_token"))
    for task_id in submitted:
        assert client.wait(task_id, timeout=120).status == TaskState.CANCELLED
    # Any error gives the rollout up: a prompt that makes no task, after one was submitted.
    submitted.clear()
    with pytest.raises(ValueError, match="instruction"):
        generate_rollout(args, rollout_id=10, data_source=DataSource(["a", 42]))
    assert len(submitted) == 1 and client.wait(submitted[0], timeout=120).status == TaskState.CANCELLED
