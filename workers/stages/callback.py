"""CALLBACK: write the terminal status, write the session's results file (``results_dir``),
publish the result once, count the session towards its task and, when it was the last one,
start the delivery of the task result to ``callback_url`` (its own Celery task, retried by
Celery with back-off: ``deliver``)."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from pipeline import keys, results_dir
from pipeline.callback_policy import own_urls, port_of, refusal
from pipeline.credentials import signature
from pipeline.errors import TransitionRefused
from pipeline.schemas import SessionResult
from pipeline.status import SessionStatus, Stage
from pipeline.stores import lua
from pipeline.stores.callbacks import without_userinfo
from pipeline.stores.leases import StageLease
from pipeline.stores.records import SessionRecords
from pipeline.stores.sessions import SessionState
from pipeline.trainers import groups
from workers.stages.callback_post import CALLBACK_TIMEOUT_SECONDS, post_pinned
from workers.stages.common import BEGIN_READS, Deps, Skip, first_reads, log


def _queue_reads(d: Deps, pipe: Any, sid: str) -> None:
    """The result EVALUATE stored, and the raw records for its results file."""
    d.stores.outputs.queue_result(pipe, sid)
    d.stores.records.queue_all(pipe, sid)


BEGIN_READS[Stage.CALLBACK] = _queue_reads  # read with the stage's begin, in its round trip


def body(d: Deps, state: SessionState, lease: StageLease) -> Stage | None:
    sid = state.session_id
    stores = d.stores
    raw, completions, errors = first_reads(d, Stage.CALLBACK, sid, state.read)
    result = stores.outputs.parse_result(raw)
    if result is None:
        raise Skip("no result stored yet")
    records = stores.records.parse_all(completions, errors)
    data = _terminate(d, sid, result)  # the result's blob: stored, and published as the same bytes
    path = _save_file(d, result, records)  # before publishing: a published result always has its file
    # One round trip: publish once, note the file, let the raw records and the trajectory expire,
    # count the session towards its task.
    def publish(pipe: Any) -> None:
        stores.results.queue_publish(pipe, result, data if stores.results.layout == stores.outputs.layout else None)
        if path is not None:
            stores.tasks.note_result_path(result.task_id, sid, str(path), pipe)
        stores.records.expire(sid, d.settings.records_ttl_seconds, pipe)
        stores.outputs.expire_trajectory(sid, d.settings.records_ttl_seconds, pipe)
        stores.tasks.queue_count_finished(pipe, result.task_id, sid)

    replies = lua.execute(stores.r, publish, transaction=False)
    entry = stores.results.published(replies[0])
    log.info("callback %s: %s published as %s", sid, result.status.value, entry)
    callback_url, early_stop = _task_options(d, state)
    _early_stop(d, result, early_stop)
    if stores.tasks.all_finished(replies):
        log.info("task %s %s", result.task_id, stores.tasks.finish(result.task_id).value)
        # Redelivered copies of the last session count it again: the outbox starts it once; the
        # reaper re-sends it if this dispatch is lost.
        if callback_url and stores.callbacks.enqueue(result.task_id, callback_url):
            d.dispatcher.callback(result.task_id)
    return None


def _terminate(d: Deps, sid: str, result: SessionResult) -> bytes:
    """The session's terminal status (and the result with its end stamp): one MULTI. Returns the
    result's blob as stored."""
    if result.timing.finished_at is None:
        result.timing.finished_at = time.time()
    sessions = d.stores.sessions
    move = sessions.transition_args(result.status, [SessionStatus.EVALUATING], {"finished_at": result.timing.finished_at})
    data = d.stores.outputs.encode_result(result)

    def terminal(pipe: Any) -> None:
        d.stores.outputs.save_result(sid, result, pipe, data)
        lua.queue(pipe, lua.SESSION_TRANSITION, [keys.session(sid)], move)

    ok, previous = lua.execute(d.stores.r, terminal, transaction=True)[-1]
    try:
        sessions.transition_result(sid, result.status, ok, previous)
    except TransitionRefused as exc:
        if exc.current != result.status.value:  # already terminal with this status: a re-run
            raise
    return data


def _task_options(d: Deps, state: SessionState) -> tuple[str | None, int | None]:
    """The task's callback_url and early_stop_min_usable_sessions: from the session's spec, or
    from the task for sessions stored before specs carried them."""
    spec = state.spec
    if spec.task_options_known:
        return spec.callback_url, spec.early_stop_min_usable_sessions
    request = d.stores.tasks.request(spec.task_id)
    return request.callback_url, request.early_stop_min_usable_sessions


def _early_stop(d: Deps, result: SessionResult, wanted: int | None) -> None:
    """early_stop_min_usable_sessions: a usable session that finds the count reached stops the
    rest (they end CANCELLED; the task completes). Counted once per session; every usable session
    at or past the count cancels (a repeated cancel only finds what is left), so a worker that
    died between counting and cancelling cannot leave the rest running once another is counted."""
    if not wanted or not groups.usable(result):
        return
    usable = d.stores.tasks.count_usable(result.task_id, result.session_id)
    if usable >= wanted:
        moved, flagged = d.stores.tasks.cancel(result.task_id, early_stop=True)
        for sid in moved:  # not held by any worker: POSTRUN tears their runtime down
            d.dispatcher.send(Stage.POSTRUN, sid)
        if moved or flagged:
            log.info("task %s: %d usable sessions, the other %d stopped early", result.task_id, usable,
                     len(moved) + flagged)


def _save_file(d: Deps, result: SessionResult, records: SessionRecords) -> Path | None:
    """The session's file in the results directory (pipeline/results_dir.py), rewritten in
    place by a redelivered stage -- unless the raw records have expired from Redis since (a late
    redelivery), when the file already written holds more than a rewrite would. A disk that
    fails is logged, not fatal: the stream stays the trainer's source and must not wait on it.
    Returns the file's path (None when it could not be written)."""
    sid, fmt = result.session_id, d.settings.results_format
    root = d.settings.results_path
    existing = results_dir.path_for(root, result.task_id, sid, fmt)
    kept = bool(records.completions or records.errors or records.unreadable)
    try:
        if not (existing.is_file() and not kept):
            results_dir.write(root, result, records.completions, records.errors, records.unreadable, fmt)
    except OSError:
        log.exception("callback %s: cannot write its results file under %s", sid, root)
        return None
    return existing


class DeliveryFailed(Exception):
    """A callback POST that may succeed later (connection error, 408/429/5xx): Celery retries
    the delivery task with exponential back-off (``workers/stages/tasks.py``), and the outbox
    knows it is due again should that retry be lost."""


def backoff_seconds(attempt: int) -> float:
    """The wait after failed attempt ``attempt`` (1, 2, 4, ... up to a minute): what Celery's
    ``retry_backoff=1, retry_backoff_max=60`` waits, recorded so the reaper agrees."""
    return float(min(60, 2 ** (attempt - 1)))


def deliver(d: Deps, task_id: str) -> dict[str, Any] | None:
    """One attempt at POSTing the task's final status to its ``callback_url``. The outbox decides
    whether this attempt may run (one at a time) and records how it ended; raises
    ``DeliveryFailed`` when it should be retried."""
    outbox = d.stores.callbacks
    # (the lease outlasts the POST's whole deadline: a reaper's resend never overlaps it)
    verdict, attempt = outbox.claim(task_id, lease_seconds=CALLBACK_TIMEOUT_SECONDS + 15,
                                    max_attempts=d.settings.callback_attempts)
    if verdict != "go":
        return outbox.record(task_id)  # ended already, or another attempt is on it
    assert isinstance(attempt, int)
    request = d.stores.tasks.request(task_id)
    url = str(request.callback_url)
    info: dict[str, Any] = {"last_attempt_at": time.time()}
    addresses = _resolve(url)
    why = refusal(url, d.settings, resolved=addresses, own_resolved=_own_addresses(d), delivering=True)
    if why:
        outbox.finish(task_id, "refused", {**info, "last_error": why})
        log.warning("task %s callback refused: %s", task_id, why)
        return outbox.record(task_id)
    body = orjson.dumps(d.stores.tasks.status(task_id, include_results=True).model_dump(mode="json"))
    retry = False
    try:
        resp = post_pinned(url, addresses, content=body, headers=_headers(d, task_id, attempt, body),
                           deadline_seconds=CALLBACK_TIMEOUT_SECONDS)
        info["status_code"] = resp.status_code
        # A 4xx other than 408/429 is the receiver refusing it: retrying will not help.
        retry = resp.status_code >= 500 or resp.status_code in (408, 429)
        ended = "delivered" if resp.status_code < 300 else "refused"
    except httpx.HTTPError as exc:
        info["last_error"] = f"{type(exc).__name__}: {exc}".replace(url, without_userinfo(url))
        retry, ended = True, "failed"
    if retry and attempt < d.settings.callback_attempts:
        outbox.retry_at(task_id, time.time() + backoff_seconds(attempt), info)
        log.info("task %s callback attempt %d failed (%s); retrying", task_id, attempt,
                 info.get("status_code") or info.get("last_error"))
        raise DeliveryFailed(f"attempt {attempt}: {info.get('status_code') or info.get('last_error')}")
    outbox.finish(task_id, "failed" if retry else ended, info)
    record = outbox.record(task_id)
    log.log(logging.INFO if ended == "delivered" else logging.WARNING, "task %s callback: %s", task_id, record)
    return record


def _resolve(url: str) -> list[str]:
    """What ``url``'s host resolves to, in the resolver's order (nothing when it does not: the
    POST then fails on its own)."""
    host = urlsplit(url).hostname
    if not host:
        return []
    try:
        return list(dict.fromkeys(str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)))
    except (OSError, UnicodeError):
        return []


def _own_addresses(d: Deps) -> list[tuple[str, int | None]]:
    """(address, port) of this service's own endpoints as they resolve now (compose and Kubernetes
    name them: a callback may spell one by its IP)."""
    return [(address, port_of(own)) for own in own_urls(d.settings) for address in _resolve(own)]


def _headers(d: Deps, task_id: str, attempt: int, body: bytes) -> dict[str, str]:
    """What a receiver needs to deduplicate (the same key on every attempt) and to check that
    the POST came from this service (see docs/delivery.md for verifying the signature)."""
    headers = {"content-type": "application/json", "Idempotency-Key": f"{task_id}:task-result",
               "X-Polar-Task-Id": task_id, "X-Polar-Attempt": str(attempt)}
    secret = d.settings.secret("callback_secret")
    if secret:
        timestamp = str(int(time.time()))
        headers["X-Polar-Timestamp"] = timestamp
        headers["X-Polar-Signature"] = signature(secret, timestamp, body)
    return headers
