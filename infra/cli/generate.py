"""``polar generate``: offline SFT data from a fixed model (``infra/generate.py``)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from infra.cli.state import client_settings


@click.command()
@click.argument("instances", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--harness", required=True, help="A harness preset (codex, claude_code, ..., pi) or shell.")
@click.option("--model", required=True, help="The model the agent sends (the proxy serves POLAR_UPSTREAM_MODEL "
              "when set: any OpenAI-compatible endpoint, hosted included, behind `polar up --no-model`).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--image-template", help="Image of a SWE-bench instance without 'image', e.g. "
              "'localhost/polar-swe-{instance_id}'.")
@click.option("--samples", type=int, default=1, show_default=True, help="Attempts per instance.")
@click.option("--min-reward", type=float, default=1.0, show_default=True, help="Accept at or above this reward.")
@click.option("--no-refresh", is_flag=True, help="Grade in the agent's own runtime (no fresh runtime).")
@click.option("--concurrency", type=int, default=16, show_default=True, help="Instances in flight at once.")
@click.option("--timeout", type=float, default=3600, show_default=True, help="Each session's budget, seconds.")
@click.option("--parquet", is_flag=True, help="Also write trajectories.parquet.")
def generate(instances: Path, harness: str, model: str, out: Path, image_template: str | None, samples: int,
             min_reward: float, no_refresh: bool, concurrency: int, timeout: float, parquet: bool) -> None:
    """Run every instance of INSTANCES (JSONL) through the pipeline; keep what the evaluation
    accepts in OUT/trajectories.jsonl; resumable (OUT/state.jsonl)."""
    from rich.progress import Progress

    from infra import generate as gen
    from pipeline.client import RolloutClient, RolloutError

    run = gen.Run(harness=harness, model=model, out=out, image_template=image_template,
                  refresh_runtime=not no_refresh, samples=samples, timeout_seconds=timeout, min_reward=min_reward)
    try:
        objs = gen.read_instances(instances)
        tasks = {gen.instance_id(o): gen.task_for(o, run) for o in objs}
    except gen.GenerateError as exc:
        raise click.ClickException(str(exc)) from exc
    out.mkdir(parents=True, exist_ok=True)
    state = gen.read_state(out)
    todo = [o for o in objs if gen.instance_id(o) not in state]
    if state:
        click.echo(f"resuming: {len(state)} of {len(objs)} instances already finished, skipped")
    client = RolloutClient.from_settings(client_settings())
    pending, in_flight = list(todo), {}
    with Progress() as progress:
        bar = progress.add_task("instances", total=len(objs), completed=len(state))
        while pending or in_flight:
            while pending and len(in_flight) < max(1, concurrency):
                obj = pending.pop(0)
                task = tasks[gen.instance_id(obj)]
                try:
                    client.submit(task)
                except RolloutError as exc:
                    if "already exists" not in str(exc):  # submitted before an interruption: wait for it
                        raise click.ClickException(f"{gen.instance_id(obj)}: {exc}") from exc
                in_flight[task["task_id"]] = obj
            for task_id, obj in list(in_flight.items()):
                if client.status(task_id, results=False).status.is_terminal():
                    results = client.status(task_id).results
                    state[gen.instance_id(obj)] = gen.record(out, obj, results, min_reward)
                    del in_flight[task_id]
                    progress.advance(bar)
            time.sleep(0.5)
    click.echo(f"{'repository':30} {'attempts':>8} {'accepted':>8} {'rate':>6}")
    for repo, attempts, accepted, rate in gen.acceptance_table(state):
        click.echo(f"{repo:30} {attempts:>8} {accepted:>8} {rate:>6.1%}")
    if parquet:
        click.echo(f"wrote {gen.write_parquet(out)}")
    click.echo(f"trajectories: {out / gen.DATA_FILE}")
