"""The empty stage tasks of ``bench/celery_floor.py``: each pushes the next stage's message and
nothing else (the last counts the session done). Same names, queues and app settings as the
real stages; the ``throughput`` variant swaps the delivery settings for Celery's fast defaults."""

from __future__ import annotations

import json
import os

import redis

from pipeline.celery_app import get_app
from pipeline.messages import stage_message
from pipeline.settings import Settings
from pipeline.status import Stage

app = get_app()
if os.environ.get("BENCH_FLOOR_VARIANT") == "throughput":
    app.conf.update(task_acks_late=False, worker_prefetch_multiplier=16, worker_disable_prefetch=False)
# One setting changed at a time, to see what each costs: BENCH_FLOOR_CONF='{"worker_disable_prefetch": false}'
app.conf.update(json.loads(os.environ.get("BENCH_FLOOR_CONF") or "{}"))
_r = redis.Redis.from_url(Settings.from_env().require_redis())
_ORDER = list(Stage)


def _make(stage: Stage):
    nxt = _ORDER[_ORDER.index(stage) + 1] if stage != Stage.CALLBACK else None

    @app.task(name=stage.task_name, acks_late=os.environ.get("BENCH_FLOOR_VARIANT") != "throughput")
    def empty_stage(session_id: str) -> None:
        if nxt is None:
            _r.incr("bench:floor:done")
        else:
            _r.lpush(nxt.queue, stage_message(nxt.task_name, session_id, nxt.queue))

    return empty_stage


TASKS = [_make(s) for s in Stage]
