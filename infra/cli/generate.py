"""``polar generate``: offline SFT data from a fixed model (``infra/generate.py``)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from infra.cli.errors import Unusable
from infra.cli.output import console, emit_json, json_option, note, progress
from infra.cli.params import SAMPLES, SECONDS
from infra.cli.state import client_settings


@click.command(epilog="Exit 2 when INSTANCES cannot be read or the API refuses a task.")
@click.argument("instances", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--harness", required=True, help="A harness preset (codex, claude_code, ..., pi) or shell.")
@click.option("--model", required=True, help="The model the agent sends (the proxy serves POLAR_UPSTREAM_MODEL "
              "when set: any OpenAI-compatible endpoint, hosted included, behind `polar up --no-model`).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--image-template", help="Image of a SWE-bench instance without 'image', e.g. "
              "'localhost/polar-swe-{instance_id}'.")
@click.option("--samples", type=SAMPLES, default=1, show_default=True, help="Attempts per instance.")
@click.option("--min-reward", type=float, default=1.0, show_default=True, help="Accept at or above this reward.")
@click.option("--no-refresh", is_flag=True, help="Grade in the agent's own runtime (no fresh runtime).")
@click.option("--concurrency", type=int, default=16, show_default=True, help="Instances in flight at once.")
@click.option("--timeout", type=SECONDS, default=3600, show_default=True, help="Each session's budget, seconds.")
@click.option("--parquet", is_flag=True, help="Also write trajectories.parquet.")
@json_option
def generate(instances: Path, harness: str, model: str, out: Path, image_template: str | None, samples: int,
             min_reward: float, no_refresh: bool, concurrency: int, timeout: float, parquet: bool,
             as_json: bool) -> None:
    """Run every instance of INSTANCES (JSONL) through the pipeline; keep what the evaluation
    accepts in OUT/trajectories.jsonl; resumable (OUT/state.jsonl)."""
    from rich.table import Table

    from infra import generate as gen
    from pipeline.client import RolloutClient, RolloutError

    run = gen.Run(harness=harness, model=model, out=out, image_template=image_template,
                  refresh_runtime=not no_refresh, samples=samples, timeout_seconds=timeout, min_reward=min_reward)
    try:
        objs = gen.read_instances(instances)
        tasks = {gen.instance_id(o): gen.task_for(o, run) for o in objs}
    except gen.GenerateError as exc:
        raise Unusable(str(exc)) from exc
    out.mkdir(parents=True, exist_ok=True)
    state = gen.read_state(out)
    todo = [o for o in objs if gen.instance_id(o) not in state]
    if state:
        note(f"resuming: {len(state)} of {len(objs)} instances already finished, skipped", as_json)
    client = RolloutClient.from_settings(client_settings())
    pending, in_flight = list(todo), {}
    with progress() as bars:
        bar = bars.add_task("instances", total=len(objs), completed=len(state), detail="")
        while pending or in_flight:
            while pending and len(in_flight) < max(1, concurrency):
                obj = pending.pop(0)
                task = tasks[gen.instance_id(obj)]
                try:
                    client.submit(task)
                except RolloutError as exc:
                    if "already exists" not in str(exc):  # submitted before an interruption: wait for it
                        raise Unusable(f"{gen.instance_id(obj)}: {exc}") from exc
                in_flight[task["task_id"]] = obj
            for task_id, obj in list(in_flight.items()):
                if client.status(task_id, results=False).status.is_terminal():
                    results = client.status(task_id).results
                    state[gen.instance_id(obj)] = gen.record(out, obj, results, min_reward)
                    del in_flight[task_id]
                    bars.advance(bar)
            bars.update(bar, detail=f"{len(in_flight)} in flight")
            time.sleep(0.5)
    rows = gen.acceptance_table(state)
    written = gen.write_parquet(out) if parquet else None
    if as_json:
        emit_json({"acceptance": [{"repository": repo, "attempts": a, "accepted": ok, "rate": rate}
                                  for repo, a, ok, rate in rows],
                   "trajectories": str(out / gen.DATA_FILE), "parquet": written and str(written)})
        return
    table = Table(title="accepted trajectories")
    for col, justify in (("repository", "left"), ("attempts", "right"), ("accepted", "right"), ("rate", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for repo, attempts, accepted, rate in rows:
        table.add_row(repo, str(attempts), str(accepted), f"{rate:.1%}")
    console.print(table)
    if written:
        click.echo(f"wrote {written}")
    click.echo(f"trajectories: {out / gen.DATA_FILE}")
