"""One real session per harness CLI through the running stack: the doctor's smoke test."""

from __future__ import annotations

import uuid

import click

from pipeline.client import RolloutClient
from pipeline.settings import Settings

INSTRUCTION = "Reply with the single word DONE and nothing else. Do not use any tool."


def smoke_sessions(settings: Settings, harnesses: list[str], timeout: float) -> int:
    """Submit one single-session task per harness; returns how many failed."""
    from infra.stack import SMOKE_POLICY

    if not settings.api_url:
        click.echo("smoke test skipped: no running stack (start `polar up`)")
        return 0
    client = RolloutClient.from_settings(settings)
    # Against the reference model the smoke policy answers; against a real engine, its model does.
    model = settings.upstream_model or SMOKE_POLICY
    tasks = {name: client.submit({
        "task_id": f"doctor-{name}-{uuid.uuid4().hex[:6]}", "instruction": INSTRUCTION, "num_samples": 1,
        "timeout_seconds": timeout, "agent": {"harness": name, "model_name": model},
        "evaluator": {"strategy": "session_completed"}, "metadata": {"doctor": True},
    }) for name in harnesses}
    failed = 0
    for name, task_id in tasks.items():
        result = client.wait(task_id, timeout=timeout + 60, poll_seconds=0.5).results[0]
        calls = result.trajectory.metadata.get("completions", 0) if result.trajectory else 0
        ok = result.status.value == "COMPLETED" and calls >= 1
        failed += not ok
        detail = f"{calls} model call(s) captured" if ok else (result.error or result.status.value)
        click.echo(f"{name:12} {'ok ' if ok else 'BAD'} smoke session {result.session_id}: {detail[:300]}")
    return failed
