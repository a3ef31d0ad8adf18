"""CALLBACK: write the terminal status, publish the result once, count the session towards its
task and, when it was the last one, POST the task result to ``callback_url``."""

from __future__ import annotations

import logging
import time

import httpx

from pipeline import keys
from pipeline.codec import pack, unpack
from pipeline.leases import StageLease
from pipeline.schemas import SessionResult
from pipeline.sessions import SessionState, TransitionRefused
from pipeline.status import SessionStatus, Stage
from workers.stages.common import Deps, Skip, log

CALLBACK_TIMEOUT_SECONDS = 30.0
CALLBACK_CLAIM_SECONDS = 600


def body(d: Deps, state: SessionState, lease: StageLease) -> Stage | None:
    sid = state.session_id
    blob = d.r.get(keys.session_result(sid))
    if blob is None:
        raise Skip("no result stored yet")
    result = SessionResult.model_validate(unpack(blob))
    if result.timing.finished_at is None:
        result.timing.finished_at = time.time()
        d.r.set(keys.session_result(sid), pack(result), ex=d.settings.result_ttl_seconds)
    try:
        d.sessions.transition(sid, result.status, expected=[SessionStatus.EVALUATING],
                              finished_at=result.timing.finished_at)
    except TransitionRefused as exc:
        if exc.current != result.status.value:  # already terminal with this status: a re-run
            raise
    entry = d.results.publish_once(result)
    log.info("callback %s: %s published as %s", sid, result.status.value, entry)
    d.sessions.expire_records(sid, d.settings.records_ttl_seconds)
    d.sessions.retire(sid)
    if d.tasks.count_finished(result.task_id, sid):
        log.info("task %s %s", result.task_id, d.tasks.finish(result.task_id).value)
        if d.tasks.request(result.task_id).callback_url and d.tasks.claim_callback(
                result.task_id, CALLBACK_CLAIM_SECONDS):
            _post_task_result(d, result.task_id)
    return None


def _post_task_result(d: Deps, task_id: str) -> None:
    request = d.tasks.request(task_id)
    payload = d.tasks.status(task_id, include_results=True).model_dump(mode="json")
    info: dict = {"url": request.callback_url, "attempts": 0, "delivered": False}
    delay = 1.0
    for attempt in range(1, d.settings.callback_attempts + 1):
        info["attempts"] = attempt
        try:
            resp = httpx.post(request.callback_url, json=payload, timeout=CALLBACK_TIMEOUT_SECONDS)
            info["status_code"] = resp.status_code
            if resp.status_code < 300:
                info["delivered"] = True
                break
            if 400 <= resp.status_code < 500 and resp.status_code not in (408, 429):
                break  # the receiver refused it; retrying will not help
        except httpx.HTTPError as exc:
            info["error"] = f"{type(exc).__name__}: {exc}"
        time.sleep(delay)
        delay *= 2
    level = logging.INFO if info["delivered"] else logging.WARNING
    log.log(level, "task %s callback: %s", task_id, info)
    d.tasks.record_callback(task_id, info)
