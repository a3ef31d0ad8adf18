"""A slime rollout function that runs the rollout through polar-rollout: a slime user switches with
one flag, ``--rollout-function-path pipeline.trainers.slime_rollout.generate_rollout``.

slime calls ``generate_rollout(args, rollout_id, data_source, evaluation=False)``. Each prompt
group from ``data_source.get_samples(args.rollout_batch_size)`` becomes one task (a GRPO group of
``args.n_samples_per_prompt`` sessions) built from a task template (``--polar-task-template``, a
JSON file: runtime, agent, builder, evaluator), with the prompt as the instruction and the
policy version and rollout id in its metadata. The results come back as slime ``Sample`` objects
(``slime.to_samples``), one list per prompt group, with the group's stats as metrics.

What it reads from ``args`` (all optional but the template): ``polar_task_template``,
``polar_api_url`` / ``polar_api_token`` (else POLAR_API_URL / POLAR_API_TOKEN),
``polar_timeout`` (seconds per rollout, default 3600), ``polar_reward_key`` (default none: a float
reward, what slime reads without ``--reward-key``; set both to the same key for a dict),
``policy_version`` (else the rollout id). Each session is one sample (``slime.to_sample``), so
every group holds ``n_samples_per_prompt``, as slime's reward post-processing reshapes them.
Evaluation is refused: it would draw the training data source's prompts (slime's eval datasets
are ``--eval-prompt-data``; leave ``--eval-function-path`` at slime's own). slime itself is
imported only when present: without it the function returns plain dicts (the tests run that way).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
import uuid
from typing import Any

from pipeline.client import RolloutClient
from pipeline.trainers import groups, slime

log = logging.getLogger("polar.trainers")


def instruction_of(prompt: Any) -> str:
    """slime's ``Sample.prompt``: a string, or chat messages (the last user turn is the task)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        for message in reversed(prompt):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                return content if isinstance(content, str) else json.dumps(content)
    raise ValueError(f"cannot take an instruction from a prompt of type {type(prompt).__name__}")


def task_for(template: dict[str, Any], prompt_group: list[Any], rollout_id: int, n: int, version: str) -> dict:
    first = prompt_group[0]
    task = copy.deepcopy(template)
    task.update(task_id=f"slime-r{rollout_id}-{uuid.uuid4().hex[:10]}", instruction=instruction_of(first.prompt),
                num_samples=n)
    task["metadata"] = {**task.get("metadata", {}), "rollout_step": str(rollout_id), "policy_version": version,
                        **({"label": first.label} if getattr(first, "label", None) is not None else {})}
    return task


def _sample_class() -> Any:
    try:
        from slime.utils.types import Sample
    except ImportError:
        return None
    return Sample


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    if evaluation:
        raise ValueError("polar's generate_rollout runs training rollouts only: evaluating would consume the training "
                         "data source's prompts; keep --eval-function-path at slime's own eval rollout")
    with open(args.polar_task_template) as f:
        template = json.load(f)
    if (template.get("builder") or {}).get("strategy", "per_request") == "per_request":
        # checked before a rollout is spent: a session of several calls would be several samples
        raise ValueError(f"{args.polar_task_template}: slime takes one sample per session, which needs "
                         '"builder": {"strategy": "prefix_merging"} in the task template')
    client = RolloutClient(getattr(args, "polar_api_url", None) or os.environ["POLAR_API_URL"],
                           api_token=getattr(args, "polar_api_token", None) or os.environ.get("POLAR_API_TOKEN"))
    n = int(getattr(args, "n_samples_per_prompt", 1))
    version = str(getattr(args, "policy_version", None) or rollout_id)
    prompt_groups = data_source.get_samples(int(getattr(args, "rollout_batch_size", 1)))
    submitted: list[str] = []
    index = 0
    try:  # a rollout given up (a timeout, Ctrl-C, a group that cannot be made samples, a refused
        # submission) cancels what it submitted and no longer waits for: nothing of it goes on sampling
        for g in prompt_groups:  # (one at a time: a submission refused midway cancels those before it)
            submitted.append(client.submit(task_for(template, g, rollout_id, n, version)))
        timeout = float(getattr(args, "polar_timeout", 3600))
        sample_cls, reward_key = _sample_class(), getattr(args, "polar_reward_key", None)
        samples, metrics = [], {"groups": len(submitted), "sessions": 0, "usable": 0, "reward_sum": 0.0}
        deadline = time.monotonic() + timeout  # for the whole rollout, not for each of its tasks
        for index, (prompt_group, task_id) in enumerate(zip(prompt_groups, submitted)):
            status = client.wait(task_id, timeout=max(0.0, deadline - time.monotonic()), poll_seconds=1.0)
            # the index slime's data source gave the group (unique across rollouts); else its place here
            given = getattr(prompt_group[0], "group_index", None)
            group = groups.Group(task_id, status.results, n)
            adv = groups.advantages(group)
            ordered = sorted(status.results, key=lambda r: r.sample_index)
            # The group's sessions that train nothing are at its usable mean: slime's baseline is theirs
            fill = groups.neutral_reward(status.results)
            samples.append([slime.to_sample(r, group_index=index if given is None else given, reward_key=reward_key,
                                            advantage=adv, sample_cls=sample_cls, fill_reward=fill) for r in ordered])
            metrics["sessions"] += len(status.results)
            metrics["usable"] += int(group.stats["usable"])
            metrics["reward_sum"] += sum(r.reward or 0.0 for r in group.usable())
    except BaseException:
        _cancel(client, submitted[index:])
        raise
    metrics["reward_mean"] = metrics["reward_sum"] / metrics["usable"] if metrics["usable"] else 0.0
    return _output(samples, metrics)


def _cancel(client: RolloutClient, task_ids: list[str]) -> None:
    for task_id in task_ids:
        try:
            client.cancel(task_id)
        except Exception as exc:  # (the error being raised says why the rollout ended; this is cleanup)
            log.warning("could not cancel task %s of a rollout given up: %s", task_id, exc)


def _output(samples: list[list[Any]], metrics: dict[str, Any]) -> Any:
    """slime's RolloutFnTrainOutput when slime is installed, else a dict."""
    try:  # slime/rollout/base_types.py
        from slime.rollout.base_types import RolloutFnTrainOutput
    except ImportError:
        return {"samples": samples, "metrics": metrics}
    return RolloutFnTrainOutput(samples=samples, metrics=metrics)
