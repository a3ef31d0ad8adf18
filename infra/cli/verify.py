"""``polar verify``: re-score every trainable token of a task's (or a file's) trajectories."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from infra.cli.errors import Unusable
from infra.cli.output import emit_json, json_option, progress
from infra.cli.params import ID, NON_NEGATIVE
from infra.cli.state import client_settings
from pipeline.settings import Settings


@click.command(epilog="Exit 0 when every trainable token checks out, 1 on a violation (or an unscored trace), "
                      "2 when the task, the file or the engine cannot be read or reached.")
@click.option("--task", "task_id", default=None, type=ID, help="Verify this task's results (fetched from the API).")
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A SessionResult or TaskStatus as JSON (or a msgpack SessionResult), or a session's file "
                   "from POLAR_RESULTS_DIR.")
@click.option("--upstream", default=None, help="Engine to score with (default: POLAR_UPSTREAM_URL).")
@click.option("--model", default=None, help="Model name at the engine (default: its first).")
@click.option("--engine", default=None, help="Engine dialect: vllm, sglang (default: POLAR_UPSTREAM_ENGINE).")
@click.option("--tolerance", type=NON_NEGATIVE, default=1e-4, show_default=True)
@click.option("--fail-on-drift", is_flag=True, help="Drifted merged turns count as violations.")
@json_option
def verify(task_id: str | None, path: Path | None, upstream: str | None, model: str | None, engine: str | None,
           tolerance: float, fail_on_drift: bool, as_json: bool) -> None:
    """Exit non-zero when a trainable token is not what the policy sampled with its logprob."""
    from proxy.verify import Report, Verifier

    if (task_id is None) == (path is None):
        raise click.UsageError("give exactly one of --task or --file")
    settings = client_settings()
    loaded = _load(task_id, path, settings)
    if not loaded:  # (`polar status --json` carries no results)
        raise Unusable(f"{path or task_id}: no session results to verify" +
                       (" (a status without results: use --task, or a session's result file)" if path else ""))
    results = [r for r in loaded if r.trajectory is not None and r.trajectory.traces]
    if not results:  # an "OK" would say something was checked
        click.echo(f"nothing to verify: none of the {len(loaded)} session(s) has a trace (no model call was "
                   "recorded)", err=True)
        sys.exit(1)
    verifier = Verifier(upstream or settings.upstream_url, model, engine=engine or settings.upstream_engine,
                        tolerance=tolerance, fail_on_drift=fail_on_drift)
    reports = []
    with progress() as bars:  # one scoring request per trace: the long wait
        bar = bars.add_task("traces scored", total=sum(len(r.trajectory.traces) for r in results), detail="")
        for result in results:
            records = _records(settings, result.session_id)
            by_id = {r.completion_id: r for r in records} if records is not None else None
            traces = []
            for i, trace in enumerate(result.trajectory.traces):
                bars.update(bar, detail=f"session {result.session_id[-12:]}")
                traces.append(verifier.verify_trace(i, trace, by_id))
                bars.advance(bar)
            reports.append((result, Report(traces, tolerance, fail_on_drift)))
    if as_json:
        emit_json([{"session_id": result.session_id, **report.as_dict()} for result, report in reports])
    else:
        for result, report in reports:
            click.echo(f"session {result.session_id} ({result.status.value}, "
                       f"{result.trajectory.metadata.get('builder', '?')}):\n{report.summary()}")
    ok = all(report.ok for _, report in reports)
    if not ok and verifier.engine.name == "sglang" and any(t.violations for _, r in reports for t in r.traces):
        click.echo("note: SGLang reports logprobs taken after its temperature (some versions after top-p too) unless it runs with "
                   "SGLANG_RETURN_ORIGINAL_LOGPROB=1; this check scores the model's own, so without that flag "
                   "every token sampled at a temperature other than 1 differs", err=True)
    sys.exit(0 if ok else 1)


def _load(task_id: str | None, path: Path | None, settings: Settings) -> list:
    from pipeline import results_dir
    from pipeline.blobs import decode_result
    from pipeline.codec import unpack
    from pipeline.schemas import SessionResult, TaskStatus

    if task_id is not None:
        from pipeline.client import RolloutClient

        return RolloutClient.from_settings(settings).status(task_id, results=True).results
    raw = path.read_bytes()  # type: ignore[union-attr]
    try:
        try:
            data = json.loads(raw)
        except ValueError:
            if raw.lstrip()[:1] in (b"{", b"["):  # meant as JSON: its own error, not msgpack's
                raise
            data = unpack(raw)
        if isinstance(data, dict) and "results" in data and "task_id" in data and "session_id" not in data:
            return TaskStatus.model_validate(data).results
        if isinstance(data, dict) and data.get("format") == results_dir.FORMAT:  # a POLAR_RESULTS_DIR file
            result = data.get("result")
            return [decode_result(result) if isinstance(result, (bytes, bytearray))
                    else SessionResult.model_validate(result)]
        return [SessionResult.model_validate(data)]
    except Exception as exc:  # noqa: BLE001 - whatever the file holds, the answer is "not a result"
        raise Unusable(f"{path}: not a SessionResult or TaskStatus (JSON or msgpack): "
                       f"{str(exc).splitlines()[0][:300]}") from exc


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
