"""An RL trainer's loop against polar-rollout, short of the gradient step (no GPU needed).

Each step: submit tasks (a GRPO group each: ``num_samples`` sessions) stamped with the current
policy version, consume results from the stream through a consumer group, close each group when
all its sessions are in, drop stale sessions, compute group advantages, print the step's stats;
then the weight swap: pause the proxy as this trainer's hold (in-flight calls drain, new ones
wait; the hold's lease lapses by itself if the trainer dies), "load" the new weights, resume
naming the hold, with the next policy version. A drain that times out loads nothing.

    polar up &                       # or any running stack
    .venv/bin/python examples/trainer.py --steps 3 --tasks 2 --group-size 4 [--json]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.cli.errors import translate  # noqa: E402
from infra.cli.state import client_settings  # noqa: E402  (a running `polar up`'s URLs and tokens)
from pipeline.client import RolloutClient, load_task_file  # noqa: E402
from pipeline.trainers import groups  # noqa: E402
from pipeline.trainers.stream_groups import iter_groups  # noqa: E402
from pipeline.weight_sync import ProxyAdmin, SwapRefused  # noqa: E402


def submit_step(client: RolloutClient, step: int, version: int, tasks: int, group_size: int) -> dict[str, int]:
    base = load_task_file(ROOT / "examples" / "demo_task.json")
    submitted = {}
    for i in range(tasks):
        task = copy.deepcopy(base)
        task.update(task_id=f"train-s{step}-t{i}-{uuid.uuid4().hex[:6]}", num_samples=group_size)
        task["metadata"].update(group_id=task["task_id"], policy_version=str(version), rollout_step=str(step))
        submitted[client.submit(task)] = group_size
    return submitted


def collect_groups(client: RolloutClient, expected: dict[str, int], timeout: float) -> tuple[list[groups.Group], int]:
    """The step's groups, each once all its sessions are in (``iter_groups``: a session
    dead-lettered or a server-side early stop closes a group too). A group's stream entries are
    acked once the next group is read (the step's last one, here, before the break); the
    sessions of a group not yet whole stay unacked, so a trainer that dies mid-step gets them
    again on its restart. Groups of other tasks (an earlier step's late sessions, another run's)
    are skipped, and their sessions counted."""
    done: list[groups.Group] = []
    others = 0
    deadline = time.monotonic() + timeout
    for group in iter_groups(client, group="example-trainer", consumer="rank0", block_ms=1000, stop_after=timeout):
        if group.task_id in expected:
            done.append(group)
        else:
            others += len(group.results)
        if len(done) == len(expected) or time.monotonic() > deadline:
            group.ack()  # (a generator cannot tell a break from a failed step: say this one is taken)
            break
    return done, others


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=2, help="GRPO groups per step")
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-lag", type=int, default=1, help="drop sessions sampled this many versions back")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", action="store_true", help="one JSON line per step instead of text")
    args = ap.parse_args()
    settings = client_settings()
    client = RolloutClient.from_settings(settings)
    admin = ProxyAdmin(settings.proxy_url or "", settings.secret("admin_token"), timeout=120)
    version = admin.current_version()  # a run started again on a stack it swapped before goes on from there
    for step in range(args.steps):
        started = time.monotonic()
        expected = submit_step(client, step, version, args.tasks, args.group_size)
        closed, others = collect_groups(client, expected, args.timeout)
        fresh = [groups.Group(g.task_id, [r for r in g.results if not groups.stale(r, version, args.max_lag)],
                              g.expected) for g in closed]
        adv = {k: v for g in fresh for k, v in groups.advantages(g).items()}
        row = {"step": step, "policy_version": version, "groups": len(closed),
               "sessions": sum(len(g.results) for g in closed), "stale_dropped": sum(
                   len(c.results) - len(f.results) for c, f in zip(closed, fresh)),
               "usable": sum(g.stats["usable"] for g in fresh),
               "reward_mean": round(sum(g.stats["reward_mean"] * g.stats["usable"] for g in fresh if g.stats["usable"])
                                    / max(1, sum(g.stats["usable"] for g in fresh)), 4),
               "trainable_tokens": sum(g.stats["trainable_tokens"] for g in fresh), "advantages": len(adv),
               "traces": sum(len(r.trajectory.traces) for g in fresh for r in g.usable()),
               "seconds": round(time.monotonic() - started, 1), "other_tasks_results_skipped": others}
        try:
            # Pause (as this trainer's hold, under a lease that lapses if it dies), load, resume under
            # version + 1; a drain that timed out loads nothing and the hold is given back.
            swap = admin.swap(version + 1, load=lambda: time.sleep(0.2), lease_seconds=300)
        except SwapRefused as exc:
            print(f"error: weight swap after step {step}: {exc}", file=sys.stderr)
            sys.exit(1)
        version = int(swap["policy_version"] or version + 1)
        row["swap_drained"] = swap["drained"]
        print(json.dumps(row) if args.json else
              f"step {row['step']}: v{row['policy_version']} {row['groups']} groups, {row['usable']}/{row['sessions']} "
              f"usable, reward {row['reward_mean']}, {row['trainable_tokens']} trainable tokens, "
              f"{row['advantages']} advantages, {row['seconds']} s; swap drained={row['swap_drained']}")
        sys.stdout.flush()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # no stack, a refused payload: one line, the CLI's exit code, no traceback
        known = translate(exc)
        if known is None:
            raise
        print(f"error: {known.format_message()}", file=sys.stderr)
        sys.exit(known.exit_code)
