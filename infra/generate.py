"""Offline SFT data generation (``polar generate``): every instance through the pipeline with a
fixed model, the trajectories the evaluation accepts written in a trainer-ready format.

An input line is a SWE-bench instance (``instance_id``, ``repo``, ``problem_statement``, ...: it
runs in its image, ``image`` or ``--image-template``, graded by ``swebench_harness``) or a whole
task payload (``instruction`` + ``evaluator``: run as it is, with the chosen harness and model).

Resuming: ``state.jsonl`` in the output folder gets one line per finished instance (flushed and
synced before the next), and every instance's task id is derived from the run (output folder,
harness, model) and the instance id -- so a restarted run skips what is recorded and, for an
instance submitted before the interruption, waits for the same task instead of running it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from pipeline.schemas import SessionResult

STATE_FILE, DATA_FILE = "state.jsonl", "trajectories.jsonl"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class GenerateError(ValueError):
    """A bad instances file or option; the message names the line or option."""


@dataclass
class Run:
    harness: str
    model: str
    out: Path
    image_template: str | None = None
    refresh_runtime: bool = True
    samples: int = 1
    timeout_seconds: float = 3600
    min_reward: float = 1.0

    @property
    def key(self) -> str:
        ident = f"{self.out.resolve()}|{self.harness}|{self.model}"
        return hashlib.sha256(ident.encode()).hexdigest()[:10]

    def task_id(self, instance_id: str) -> str:
        """Stable per instance (a run resumes by it), and distinct per instance: an id that had to be
        cleaned or cut (``x/1`` and ``x_1`` clean alike) carries a digest of itself."""
        clean = _UNSAFE.sub("_", instance_id)
        if clean != instance_id or len(clean) > 150:
            clean = f"{clean[:139]}-{hashlib.sha256(instance_id.encode()).hexdigest()[:10]}"
        return f"gen-{self.key}-{clean}"


def read_instances(path: Path) -> list[dict[str, Any]]:
    out, seen = [], set()
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise GenerateError(f"{path}: not UTF-8 text (byte {exc.start}); instances are JSON lines") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise GenerateError(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise GenerateError(f"{path}:{n}: expected an object")
        iid = obj.get("instance_id") or obj.get("task_id")
        if not isinstance(iid, str) or not iid:
            raise GenerateError(f"{path}:{n}: needs an 'instance_id'")
        if iid in seen:
            raise GenerateError(f"{path}:{n}: instance {iid!r} appears twice")
        seen.add(iid)
        out.append(obj)
    return out


def instance_id(obj: dict[str, Any]) -> str:
    return str(obj.get("instance_id") or obj.get("task_id"))


def _image_from_template(template: str | None, obj: dict[str, Any], iid: str) -> str | None:
    if not template:
        return None
    try:
        return template.format(**{k: v for k, v in obj.items() if isinstance(v, str)})
    except (KeyError, IndexError, ValueError) as exc:
        raise GenerateError(f"instance {iid!r}: --image-template {template!r} cannot be filled from its fields "
                            f"({type(exc).__name__}: {exc}); name string fields, e.g. {{instance_id}}") from None


def task_for(obj: dict[str, Any], run: Run) -> dict[str, Any]:
    """The task payload of one input line."""
    iid = instance_id(obj)
    agent = {"harness": run.harness, "model_name": run.model}
    meta = {"instance_id": iid, "repo": repo_of(obj),
            "generate_run": run.key}
    if "instruction" in obj and "evaluator" in obj:  # a whole task payload
        task = {k: v for k, v in obj.items() if k != "instance_id"}
        task.update(task_id=run.task_id(iid), num_samples=run.samples, agent={**task.get("agent", {}), **agent},
                    metadata={**task.get("metadata", {}), **meta})
        if run.harness != "shell":  # a preset runs its own CLI
            task["agent"].pop("custom_shell", None)
        return task
    if "problem_statement" not in obj:
        raise GenerateError(f"instance {iid!r}: neither a SWE-bench instance (problem_statement) nor a task "
                            "(instruction + evaluator)")
    image = obj.get("image") or _image_from_template(run.image_template, obj, iid)
    if not image:
        raise GenerateError(f"instance {iid!r}: no image (give 'image' or --image-template)")
    return {"task_id": run.task_id(iid), "instruction": obj["problem_statement"], "num_samples": run.samples,
            "timeout_seconds": run.timeout_seconds,
            "runtime": {"backend": "docker", "image": image, "workdir": "/testbed"},
            "agent": agent, "builder": {"strategy": "prefix_merging"},
            "evaluator": {"strategy": "swebench_harness", "refresh_runtime": run.refresh_runtime,
                          "config": {"instance": obj}},
            "metadata": meta}


def trace_rows(result: SessionResult, iid: str, repo: str) -> Iterator[dict[str, Any]]:
    """One trainer-ready row per trace: messages, token ids, loss mask, behaviour logprobs."""
    for i, t in enumerate(result.trajectory.traces):
        yield {"instance_id": iid, "repo": repo, "session_id": result.session_id, "trace_index": i,
               "reward": t.reward if t.reward is not None else result.reward,
               "messages": [*t.prompt_messages, *t.response_messages], "tools": t.tools,
               "prompt_ids": t.prompt_ids, "response_ids": t.response_ids, "loss_mask": t.loss_mask,
               "response_logprobs": [lp.logprob for lp in t.response_logprobs],
               "policy_version": t.metadata.get("policy_version")}


def read_state(out: Path) -> dict[str, dict[str, Any]]:
    path = out / STATE_FILE
    if not path.exists():
        return {}
    state = {}
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by the interruption: that instance is simply not finished
        state[rec["instance_id"]] = rec
    return state


def append_lines(path: Path, rows: list[dict[str, Any]]) -> None:
    """Append and sync: a line on disk is a line a restart can trust."""
    with path.open("a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def record(out: Path, obj: dict[str, Any], results: list[SessionResult], min_reward: float) -> dict[str, Any]:
    """Write the accepted trajectories of one finished instance, then its state line."""
    iid, repo = instance_id(obj), repo_of(obj)
    accepted = [r for r in results if r.reward is not None and r.reward >= min_reward and r.trajectory.traces]
    append_lines(out / DATA_FILE, [row for r in accepted for row in trace_rows(r, iid, repo)])
    rec = {"instance_id": iid, "repo": repo, "attempts": len(results), "accepted": len(accepted),
           "rewards": [r.reward for r in results], "statuses": [r.status.value for r in results]}
    append_lines(out / STATE_FILE, [rec])
    return rec


def repo_of(obj: dict[str, Any]) -> str:
    return str(obj.get("repo") or obj.get("metadata", {}).get("repo") or "-")


def acceptance_table(state: dict[str, dict[str, Any]]) -> list[tuple[str, int, int, float]]:
    """(repository, attempts, accepted, rate) per repository, then the total (Table 2's layout)."""
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for rec in state.values():
        per[rec["repo"]][0] += rec["attempts"]
        per[rec["repo"]][1] += rec["accepted"]
    rows = [(repo, a, ok, ok / a if a else 0.0) for repo, (a, ok) in sorted(per.items())]
    total_a, total_ok = sum(r[1] for r in rows), sum(r[2] for r in rows)
    return [*rows, ("total", total_a, total_ok, total_ok / total_a if total_a else 0.0)]


def write_parquet(out: Path) -> Path:
    """trajectories.jsonl as Parquet (needs pyarrow: the `generate` extra)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise GenerateError("--parquet needs pyarrow (pip install 'polar-rollout[generate]')") from exc
    rows = [json.loads(line) for line in (out / DATA_FILE).read_text().splitlines()] \
        if (out / DATA_FILE).exists() else []
    for row in rows:  # nested free-form JSON stays JSON text: one schema for every harness
        row["messages"], row["tools"] = json.dumps(row["messages"]), json.dumps(row["tools"])
    target = out / "trajectories.parquet"
    pq.write_table(pa.Table.from_pylist(rows), target)
    return target
