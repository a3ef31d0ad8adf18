"""One real session per harness CLI through the running stack: the doctor's smoke test."""

from __future__ import annotations

import uuid
from typing import Any

from infra.cli.output import progress
from pipeline.client import RolloutClient
from pipeline.settings import Settings

INSTRUCTION = "Reply with the single word DONE and nothing else. Do not use any tool."


def smoke_sessions(settings: Settings, harnesses: list[str], timeout: float) -> list[dict[str, Any]]:
    """Submit one single-session task per harness and wait for them (a progress bar on stderr);
    one row per harness: ok, the session, what it captured or why it failed."""
    from infra.stack import SMOKE_POLICY

    client = RolloutClient.from_settings(settings)
    # Against the reference model the smoke policy answers; against a real engine, its model does.
    model = settings.upstream_model or SMOKE_POLICY
    tasks = {name: client.submit({
        "task_id": f"doctor-{name}-{uuid.uuid4().hex[:6]}", "instruction": INSTRUCTION, "num_samples": 1,
        "timeout_seconds": timeout, "agent": {"harness": name, "model_name": model},
        "evaluator": {"strategy": "session_completed"}, "metadata": {"doctor": True},
    }) for name in harnesses}
    rows = []
    with progress() as bars:
        bar = bars.add_task("smoke sessions", total=len(tasks), detail="")
        for name, task_id in tasks.items():
            bars.update(bar, detail=name)
            result = client.wait(task_id, timeout=timeout + 60, poll_seconds=0.5).results[0]
            calls = result.trajectory.metadata.get("completions", 0) if result.trajectory else 0
            ok = result.status.value == "COMPLETED" and calls >= 1
            rows.append({"harness": name, "ok": ok, "session_id": result.session_id, "status": result.status.value,
                         "model_calls": calls,
                         "detail": f"{calls} model call(s) captured" if ok else (result.error or result.status.value)})
            bars.advance(bar)
        bars.update(bar, detail="done")
    return rows
