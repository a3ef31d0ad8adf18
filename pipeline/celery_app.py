"""The Celery app: one queue per stage, tasks addressed by name (so ``pipeline`` never imports
``workers``), delivery settings chosen for stages that hold a slot for up to hours.

Delivery model (see docs/delivery.md): late acks with no prefetch beyond running tasks, and a
visibility timeout far above the longest stage, identical in every process (kombu's shortest
value wins across a database). Redelivery is still possible (a lost worker, a crash between
publishing the next stage and acking), so every stage is idempotent per session through its
stage lease and status checks.

``celery -A pipeline.celery_app`` finds ``app`` lazily, so importing this module never needs a
Redis URL; touching ``app`` does.
"""

from __future__ import annotations

import functools
from typing import Any

from celery import Celery
from kombu import Queue

from pipeline import broker_transport
from pipeline.settings import Settings
from pipeline.status import Stage

broker_transport.install()  # before any broker connection of this process

STAGE_TASKS_MODULE = "workers.stages.tasks"  # imported by workers only, by name
# Delivery of a finished task's result to its callback_url (retried by Celery, on the CALLBACK
# queue: its fleet is the one that waits on HTTP).
CALLBACK_DELIVERY_TASK = "polar.callback.deliver"


def celery_config(settings: Settings) -> dict[str, Any]:
    vt = settings.visibility_timeout_seconds
    return dict(
        broker_url=settings.require_redis(),
        # The only place kombu reads it (Celery's own `visibility_timeout` key is read by nothing).
        broker_transport_options={"visibility_timeout": vt},
        broker_connection_retry_on_startup=True,
        task_queues=[Queue(s.queue) for s in Stage],
        task_routes={**{s.task_name: {"queue": s.queue} for s in Stage},
                     CALLBACK_DELIVERY_TASK: {"queue": Stage.CALLBACK.queue}},
        task_default_queue=Stage.CALLBACK.queue,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        result_backend=None,
        # Long stages: ack after the task returns, reserve nothing beyond running tasks.
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        worker_disable_prefetch=True,
        task_acks_on_failure=True,
        task_acks_on_timeout=True,
        task_reject_on_worker_lost=False,
        # A killed child is retried (bounded by the task's max_retries), never looped.
        task_retry_on_worker_lost=True,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        # Flower sees queued, started and finished tasks of every stage.
        worker_send_task_events=settings.task_events,
        task_send_sent_event=settings.task_events,
        task_track_started=True,
        worker_hijack_root_logger=False,
    )


@functools.lru_cache(maxsize=4)
def make_app(settings: Settings) -> Celery:
    app = Celery("polar")
    app.conf.update(celery_config(settings))
    return app


def get_app() -> Celery:
    return make_app(Settings.from_env())


def __getattr__(name: str) -> Any:  # PEP 562: `celery -A pipeline.celery_app` asks for `app`
    if name in ("app", "celery"):
        return get_app()
    raise AttributeError(name)


def dispatch(app: Celery, stage: Stage, session_id: str, **options: Any) -> None:
    """Enqueue one stage of one session (by task name; the worker fleet of that queue runs it)."""
    app.send_task(stage.task_name, args=[session_id], queue=stage.queue, **options)


def dispatch_callback(app: Celery, task_id: str) -> None:
    """Enqueue the delivery of a finished task's result to its callback_url."""
    app.send_task(CALLBACK_DELIVERY_TASK, args=[task_id], queue=Stage.CALLBACK.queue)


def stage_queues() -> list[str]:
    return [s.queue for s in Stage]
