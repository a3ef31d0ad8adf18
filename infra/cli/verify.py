"""``polar verify``: re-score every trainable token of a task's (or a file's) trajectories."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from infra.cli.state import client_settings
from pipeline.settings import Settings


@click.command()
@click.option("--task", "task_id", default=None, help="Verify this task's results (fetched from the API).")
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A SessionResult or TaskStatus as JSON (or a msgpack SessionResult).")
@click.option("--upstream", default=None, help="Engine to score with (default: POLAR_UPSTREAM_URL).")
@click.option("--model", default=None, help="Model name at the engine (default: its first).")
@click.option("--engine", default=None, help="Engine dialect: vllm, sglang (default: POLAR_UPSTREAM_ENGINE).")
@click.option("--tolerance", type=float, default=1e-4, show_default=True)
@click.option("--fail-on-drift", is_flag=True, help="Drifted merged turns count as violations.")
@click.option("--json", "as_json", is_flag=True)
def verify(task_id: str | None, path: Path | None, upstream: str | None, model: str | None, engine: str | None,
           tolerance: float, fail_on_drift: bool, as_json: bool) -> None:
    """Exit non-zero when a trainable token is not what the policy sampled with its logprob."""
    from proxy.verify import Verifier

    if (task_id is None) == (path is None):
        raise click.UsageError("give exactly one of --task or --file")
    settings = client_settings()
    results = _load(task_id, path, settings)
    verifier = Verifier(upstream or settings.upstream_url, model, engine=engine or settings.upstream_engine,
                        tolerance=tolerance, fail_on_drift=fail_on_drift)
    ok, out = True, []
    for result in results:
        report = verifier.verify(result.trajectory, _records(settings, result.session_id))
        ok = ok and report.ok
        if as_json:
            out.append({"session_id": result.session_id, **report.as_dict()})
        else:
            click.echo(f"session {result.session_id} ({result.status.value}, "
                       f"{result.trajectory.metadata.get('builder', '?')}):\n{report.summary()}")
    if as_json:
        click.echo(json.dumps(out, indent=2))
    sys.exit(0 if ok else 1)


def _load(task_id: str | None, path: Path | None, settings: Settings) -> list:
    from pipeline.codec import unpack
    from pipeline.schemas import SessionResult, TaskStatus

    if task_id is not None:
        from pipeline.client import RolloutClient

        return RolloutClient.from_settings(settings).status(task_id, results=True).results
    raw = path.read_bytes()  # type: ignore[union-attr]
    try:
        data = json.loads(raw)
    except ValueError:
        data = unpack(raw)
    if "results" in data and "task_id" in data and "session_id" not in data:
        return TaskStatus.model_validate(data).results
    return [SessionResult.model_validate(data)]


def _records(settings: Settings, session_id: str) -> list | None:
    """The session's completion records, for the id check, while Redis still keeps them."""
    if not settings.redis_url:
        return None
    from pipeline.stores.connection import connect
    from pipeline.stores.records import RecordStore

    try:
        records, _ = RecordStore(connect(settings), settings.records_ttl_seconds).completions(session_id)
    except Exception:  # the id check is a bonus; scoring still runs
        return None
    return records or None
