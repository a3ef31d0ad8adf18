"""slime_rollout gives a rollout up on any error, not only a timeout: what it submitted and
still waits for is cancelled (it went on sampling, taking the engine from the next rollout)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from pipeline.trainers import groups, slime_rollout


class FakeClient:
    cancelled: list[str] = []

    def __init__(self, *args, **kwargs) -> None:
        self.n = 0

    def submit(self, task: dict) -> str:
        self.n += 1
        return f"task-{self.n}"

    def wait(self, task_id: str, **kwargs) -> SimpleNamespace:
        return SimpleNamespace(results=[])

    def cancel(self, task_id: str) -> None:
        FakeClient.cancelled.append(task_id)


def test_an_error_turning_a_group_into_samples_cancels_the_tasks_still_running(tmp_path, monkeypatch):
    template = tmp_path / "template.json"
    template.write_text(json.dumps({"instruction": "x", "builder": {"strategy": "prefix_merging"}}))
    monkeypatch.setattr(slime_rollout, "RolloutClient", FakeClient)
    FakeClient.cancelled = []

    def broken(group):  # e.g. slime.RolloutLogprobError: a trainable token without its logprob
        raise RuntimeError("trainable tokens without a logprob")

    monkeypatch.setattr(groups, "advantages", broken)
    prompts = [[SimpleNamespace(prompt=p, group_index=i)] for i, p in enumerate("abc")]
    args = SimpleNamespace(polar_task_template=str(template), polar_api_url="http://api.test", polar_api_token="t",
                           n_samples_per_prompt=1, rollout_batch_size=3, polar_timeout=5)
    with pytest.raises(RuntimeError, match="logprob"):
        slime_rollout.generate_rollout(args, 1, SimpleNamespace(get_samples=lambda n: prompts))
    assert FakeClient.cancelled == ["task-1", "task-2", "task-3"]
