"""Terminal output of tasks: a progress bar (stderr) while one runs, tables (stdout) when it is
done, and the same data as JSON for ``--json``."""

from __future__ import annotations

import time
from statistics import mean
from typing import Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from infra.cli.output import console, err_console, progress
from pipeline.client import RolloutClient, api_outage
from pipeline.schemas import TaskStatus

STAGE_COLUMNS = ("queue", "init", "ready_wait", "run", "postrun", "evaluate", "total")


class FollowTimeout(TimeoutError):
    """The task did not end in time; ``last`` is its latest status."""

    def __init__(self, message: str, last: TaskStatus) -> None:
        super().__init__(message)
        self.last = last


def follow(client: RolloutClient, task_id: str, *, timeout: float | None = None,
           poll_seconds: float = 0.5, tables: bool = True) -> TaskStatus:
    """Show a progress bar until the task ends, then (``tables``) the summary; returns the final
    status. Raises FollowTimeout after ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with progress() as bars:
        bar, away = None, False
        while True:
            try:
                st = client.status(task_id, results=False)
            except Exception as exc:  # an API restart (or its Redis away) is waited out, not fatal
                if not api_outage(exc) or (deadline is not None and time.monotonic() > deadline):
                    raise  # (past the deadline, what was in the way says more than "not finished")
                why = f"the API is unavailable ({type(exc).__name__}); polling on"
                if bar is not None:
                    bars.update(bar, detail=why)
                if not away and not err_console.is_terminal:  # no live bar to say it: one line each way
                    err_console.print(f"{time.strftime('%H:%M:%S')} {why} (Ctrl-C stops waiting; --timeout "
                                      "bounds the wait)")
                away = True
                time.sleep(poll_seconds)
                continue
            if away and not err_console.is_terminal:
                err_console.print(f"{time.strftime('%H:%M:%S')} the API answers again")
            away = False
            if bar is None:
                bar = bars.add_task(escape(task_id), total=st.total_sessions, detail="")
            counts = " ".join(f"{k.lower()}={v}" for k, v in sorted(st.counts.items()))
            bars.update(bar, completed=st.finished_sessions, detail=counts)
            if st.status.is_terminal():
                break
            if deadline is not None and time.monotonic() > deadline:
                raise FollowTimeout(f"task {task_id} not finished after {timeout:g}s "
                                    f"({counts or 'no session done'})", st)
            time.sleep(poll_seconds)
    if tables:
        print_task(st)
    return st


def task_summary(st: TaskStatus) -> dict[str, Any]:
    """What print_task shows, as JSON: the status with its sessions, and the mean time per stage."""
    return {**st.model_dump(mode="json"), "mean_stage_ms": stage_split(st)}


def print_task(st: TaskStatus) -> None:
    # Ids and errors are the submitter's and the agent's text, never rich markup: an error holding
    # "[/red]" made `polar status` and `submit --wait` die with a MarkupError traceback.
    table = Table(title=Text(f"task {st.task_id}: {st.status.value}"))
    for col in ("#", "session", "status", "reward", "traces", "prompt tok", "response tok",
                "trainable tok", "time s", "error"):
        table.add_column(col, overflow="fold")
    for s in sorted(st.sessions, key=lambda s: s.sample_index):
        total = s.durations_ms.get("total")
        table.add_row(str(s.sample_index), Text(s.session_id[-12:]), s.status.value,
                      "-" if s.reward is None else f"{s.reward:.2f}", str(s.num_traces),
                      str(s.prompt_tokens), str(s.response_tokens), str(s.trainable_tokens),
                      "-" if total is None else f"{total / 1000:.2f}", Text((s.error or "")[:80]))
    console.print(table)
    print_stage_split(st)


def stage_split(st: TaskStatus) -> dict[str, float | None]:
    """Mean milliseconds each stage took across the task's sessions."""
    out: dict[str, float | None] = {}
    for name in STAGE_COLUMNS:
        vals = [s.durations_ms.get(name) for s in st.sessions]
        nums = [v for v in vals if v is not None]
        out[name] = mean(nums) if nums else None
    return out


def print_stage_split(st: TaskStatus) -> None:
    split = stage_split(st)
    table = Table(title="mean time per stage (ms)")
    for name in STAGE_COLUMNS:
        table.add_column(name, justify="right")
    table.add_row(*["-" if split[n] is None else f"{split[n]:.0f}" for n in STAGE_COLUMNS])
    console.print(table)


def print_pipeline(data: dict[str, Any]) -> None:
    table = Table(title="pipeline")
    table.add_column("what")
    table.add_column("value", overflow="fold")
    table.add_row("tasks", Text(", ".join(f"{k}={v}" for k, v in data.get("tasks", {}).items()) or "-"))
    table.add_row("queues", Text(", ".join(f"{k}={v}" for k, v in data.get("queues", {}).items())))
    ready = data.get("ready", {})
    table.add_row("READY", f"depth={ready.get('depth')} reserved={ready.get('reserved')} "
                           f"capacity={ready.get('capacity')}")
    for name, queues in (data.get("workers") or {}).items():
        table.add_row(Text(f"worker {name}"), Text(", ".join(queues) if isinstance(queues, list) else str(queues)))
    proxy = data.get("proxy") or {}
    if proxy.get("paused"):  # new model calls are waiting: say who holds them, and until when at most
        latest = proxy.get("lease_expires_latest")
        until = time.strftime("%H:%M:%S", time.localtime(latest)) if latest else "?"
        table.add_row("proxy", Text(f"PAUSED for weight sync: {proxy.get('holders')} holder(s), until {until} at the "
                                    f"latest; policy_version={proxy.get('policy_version')}"))
    console.print(table)
