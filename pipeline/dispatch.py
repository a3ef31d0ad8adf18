"""Sending stage messages: each is first recorded as sent (``stores/leases.py``: removed when
its stage starts), then published to its Celery queue, so a message that is lost on the way
-- a dispatcher that dies between the two, a worker killed just after fetching it, a broker
that drops it -- shows up as sent-and-never-started and the reaper sends it again."""

from __future__ import annotations

import redis
from celery import Celery

from pipeline.celery_app import dispatch, dispatch_callback
from pipeline.status import Stage
from pipeline.stores.leases import note_sent


class Dispatcher:
    def __init__(self, app: Celery, r: redis.Redis) -> None:
        self.app = app
        self._r = r

    def send(self, stage: Stage, session_id: str, priority: int | None = None) -> None:
        """``priority``: the INIT message's (``celery_app.init_priority``); None for the others."""
        note_sent(self._r, session_id, stage)
        dispatch(self.app, stage, session_id, **({"priority": priority} if priority is not None else {}))

    def callback(self, task_id: str) -> None:
        """Deliver a finished task's callback (the outbox tracks it; see stores/callbacks.py)."""
        dispatch_callback(self.app, task_id)
