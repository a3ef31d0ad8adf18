"""Sending stage messages: each is recorded as sent (``stores/leases.py``: removed when its stage
starts) and pushed onto its Celery queue in one atomic step (``stores/stage_runs.py``), so a
message that is lost later -- a worker killed just after fetching it, a broker that drops it --
shows up as sent-and-never-started and the reaper sends it again. The callback delivery task
goes through Celery's own ``send_task`` (once per task, with its retry options)."""

from __future__ import annotations

from celery import Celery

from pipeline.celery_app import dispatch_callback
from pipeline.status import Stage
from pipeline.stores.stage_runs import StageRuns


class Dispatcher:
    def __init__(self, app: Celery, runs: StageRuns) -> None:
        self.app = app
        self._runs = runs

    def send(self, stage: Stage, session_id: str, priority: int | None = None) -> None:
        """``priority``: the INIT message's (``messages.init_priority``); None for the others."""
        self._runs.send(stage, session_id, priority or 0)

    def callback(self, task_id: str) -> None:
        """Deliver a finished task's callback (the outbox tracks it; see stores/callbacks.py)."""
        dispatch_callback(self.app, task_id)
