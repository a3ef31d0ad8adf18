"""Trainer updates per session, per_request vs prefix_merging, on a real multi-turn workload:
the example agent under a 12-turn scripted policy, through the whole pipeline.

    .venv/bin/python bench/updates_bench.py [--samples 4] [--quick] [--json]

``--quick``: 2 sessions per builder. ``--json``: the figures as one JSON line (bench/figures.py),
the table on stderr; the goal is the same trainable tokens either way (merging removes only
re-sent prompts).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.figures import emit, figure  # noqa: E402
from infra.refserver import build_tiny_model  # noqa: E402
from infra.stack import Stack, StackConfig  # noqa: E402
from pipeline.client import RolloutClient, load_task_file  # noqa: E402
from pipeline.settings import Settings  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="2 sessions per builder")
    ap.add_argument("--json", action="store_true", help="the figures as one JSON line; the table on stderr")
    args = ap.parse_args()
    if args.quick:
        args.samples = 2
    out = sys.stderr if args.json else sys.stdout
    home = Path(tempfile.mkdtemp(prefix="polar-updates-"))
    model = build_tiny_model(home / "model")
    config = StackConfig(settings=Settings(home=home), model_dir=model,
                         policies={"long": str(ROOT / "bench" / "long_policy.json")})
    with Stack(config) as stack:
        client = RolloutClient.from_settings(stack.settings)
        rows = {}
        for builder in ("per_request", "prefix_merging"):
            task = load_task_file(ROOT / "examples" / "demo_task.json")
            task.update(task_id=f"updates-{builder}-{uuid.uuid4().hex[:6]}", num_samples=args.samples,
                        builder={"strategy": builder})
            task["agent"]["model_name"] = "long"
            status = client.wait(client.submit(task), timeout=600)
            traces = [t for r in status.results for t in r.trajectory.traces]
            rows[builder] = (len(traces), sum(len(t.prompt_ids) + len(t.response_ids) for t in traces),
                             sum(t.trainable_tokens for t in traces), status.counts)
    shutil.rmtree(home, ignore_errors=True)  # the model and the stack's logs
    print(f"{args.samples} sessions x 12 model calls (example agent, scripted 12-turn policy):", file=out)
    print(f"{'builder':>15} {'trainer updates':>16} {'tokens to train on':>19} {'trainable':>10}  sessions", file=out)
    for name, (updates, tokens, trainable, counts) in rows.items():
        print(f"{name:>15} {updates:>16} {tokens:>19} {trainable:>10}  {counts}", file=out)
    pr, pm = rows["per_request"], rows["prefix_merging"]
    print(f"prefix_merging: {pr[0] / pm[0]:.1f}x fewer updates, {pr[1] / pm[1]:.1f}x fewer tokens, "
          f"same trainable tokens: {pr[2] == pm[2]}", file=out)
    if args.json:
        measured_on = f"{args.samples} sessions per builder, example agent, scripted 12-turn policy"
        emit("updates", [
            figure("per_request / prefix_merging trainer updates", round(pr[0] / pm[0], 1), "x", measured_on),
            figure("per_request / prefix_merging tokens to train on", round(pr[1] / pm[1], 1), "x", measured_on),
            figure("same trainable tokens either way", pr[2] == pm[2], "", measured_on, ("==", True)),
        ], rows={name: {"updates": u, "tokens": t, "trainable": tr, "sessions": c}
                 for name, (u, t, tr, c) in rows.items()})


if __name__ == "__main__":
    main()
