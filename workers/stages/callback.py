"""CALLBACK: write the terminal status, publish the result once, count the session towards its
task and, when it was the last one, start the delivery of the task result to ``callback_url``
(its own Celery task, retried by Celery with back-off: ``deliver``)."""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx

from pipeline.celery_app import dispatch_callback
from pipeline.errors import TransitionRefused
from pipeline.status import SessionStatus, Stage
from pipeline.stores.leases import StageLease
from pipeline.stores.sessions import SessionState
from workers.stages.common import Deps, Skip, log

CALLBACK_TIMEOUT_SECONDS = 30.0
CALLBACK_CLAIM_SECONDS = 600


def body(d: Deps, state: SessionState, lease: StageLease) -> Stage | None:
    sid = state.session_id
    result = d.stores.outputs.result(sid)
    if result is None:
        raise Skip("no result stored yet")
    if result.timing.finished_at is None:
        result.timing.finished_at = time.time()
        d.stores.outputs.save_result(sid, result)
    try:
        d.stores.sessions.transition(sid, result.status, expected=[SessionStatus.EVALUATING],
                              finished_at=result.timing.finished_at)
    except TransitionRefused as exc:
        if exc.current != result.status.value:  # already terminal with this status: a re-run
            raise
    entry = d.stores.results.publish_once(result)
    log.info("callback %s: %s published as %s", sid, result.status.value, entry)
    d.stores.records.expire(sid, d.settings.records_ttl_seconds)
    d.stores.outputs.expire_trajectory(sid, d.settings.records_ttl_seconds)
    d.stores.sessions.retire(sid)
    tasks = d.stores.tasks
    if tasks.count_finished(result.task_id, sid):
        log.info("task %s %s", result.task_id, tasks.finish(result.task_id).value)
        # Redelivered copies of the last session count it again: only one starts the delivery.
        if tasks.request(result.task_id).callback_url and tasks.claim_callback(result.task_id, CALLBACK_CLAIM_SECONDS):
            dispatch_callback(d.app, result.task_id)
    return None


class DeliveryFailed(Exception):
    """A callback POST that may succeed later (connection error, 408/429/5xx): Celery retries
    the delivery task with exponential back-off (``workers/stages/tasks.py``)."""


def deliver(d: Deps, task_id: str, attempt: int, final: bool) -> dict[str, Any] | None:
    """POST the task's final status to its ``callback_url``; record the outcome in the task once
    it is delivered, refused, or out of attempts. Raises ``DeliveryFailed`` to be retried."""
    tasks = d.stores.tasks
    done = tasks.callback_record(task_id)
    if done is not None:
        return done  # a redelivered copy of a finished delivery
    request = tasks.request(task_id)
    payload = tasks.status(task_id, include_results=True).model_dump(mode="json")
    info: dict[str, Any] = {"url": request.callback_url, "attempts": attempt, "delivered": False}
    retry = False
    try:
        resp = httpx.post(str(request.callback_url), json=payload, timeout=CALLBACK_TIMEOUT_SECONDS)
        info["status_code"] = resp.status_code
        info["delivered"] = resp.status_code < 300
        # A 4xx other than 408/429 is the receiver refusing it: retrying will not help.
        retry = resp.status_code >= 500 or resp.status_code in (408, 429)
    except httpx.HTTPError as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"
        retry = True
    if retry and not final:
        log.info("task %s callback attempt %d failed (%s); retrying", task_id, attempt,
                 info.get("status_code") or info.get("error"))
        raise DeliveryFailed(str(info))
    log.log(logging.INFO if info["delivered"] else logging.WARNING, "task %s callback: %s", task_id, info)
    tasks.record_callback(task_id, info)
    return info
