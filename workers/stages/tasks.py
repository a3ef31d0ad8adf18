"""Stage tasks, registered on the Celery app by name (``polar.stage.<stage>``).

Imported by workers only (``-I workers.stages.tasks``); each queue's fleet consumes its own
queue. Pools are chosen per stage when the worker starts (``infra.stack.STAGE_POOLS``).
"""

from __future__ import annotations

import gc
import logging

from celery.signals import worker_process_init, worker_ready

from pipeline.celery_app import CALLBACK_DELIVERY_TASK, get_app
from pipeline.status import Stage
from workers.stages import callback, reaper
from workers.stages.bodies import BODIES
from workers.stages.common import deps, run_stage

app = get_app()

# httpx logs every request at INFO with its whole URL: a callback URL's user, password and query
# token -- masked wherever the service shows the URL -- would be written to the worker's log.
logging.getLogger("httpx").setLevel(logging.WARNING)


def _make_task(stage: Stage):
    body, recover = BODIES[stage]

    # max_retries bounds task_retry_on_worker_lost: a killed child is retried once, and the
    # retry finds the stage "started" and recovers instead of repeating side effects.
    @app.task(name=stage.task_name, bind=True, max_retries=1, acks_late=True)
    def stage_task(self, session_id: str) -> str:
        return run_stage(stage, session_id, body, recover)

    return stage_task


TASKS = {stage: _make_task(stage) for stage in Stage}


# Retried by Celery itself (a new message with a countdown, 1 s doubling up to a minute) while
# the receiver is unreachable or answers 408/429/5xx; the outbox counts the attempts, ends the
# delivery when the budget is spent, and lets the reaper resend one whose worker died.
@app.task(name=CALLBACK_DELIVERY_TASK, bind=True, acks_late=True, autoretry_for=(callback.DeliveryFailed,),
          retry_backoff=1, retry_backoff_max=60, retry_jitter=False, max_retries=None)
def deliver_callback(self, task_id: str) -> None:
    callback.deliver(deps(), task_id)


def _collect_less() -> None:
    """The worker's modules, app and pools are long-lived: frozen, the cyclic collector never
    walks them again, and it runs every 10,000 allocations rather than 700 (a stage allocates a
    few thousand short-lived objects; Celery's and ours hold few cycles)."""
    gc.freeze()
    gc.set_threshold(10_000, 20, 100)


@worker_process_init.connect
def _child_collects_less(**_: object) -> None:
    _collect_less()  # a prefork pool child (POSTRUN): after the fork, what it inherited


@worker_ready.connect
def _start_reaper(**_: object) -> None:
    """Every worker runs the reaper loop; a Redis lock lets one pass run at a time."""
    _collect_less()
    reaper.start()

