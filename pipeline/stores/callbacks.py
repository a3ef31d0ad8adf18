"""The callback outbox: the durable state of delivering a finished task's result to its
``callback_url``.

One hash per task (state, attempts, last answer) and a sorted set of deliveries by when they are
due. A delivery attempt holds a short lease while it POSTs; whatever ends it -- success, a
refusal, a retry scheduled with back-off, or a worker killed mid-POST (the lease lapses and the
entry is still due) -- the outbox says what happens next, so the reaper can always pick up a
lost delivery. Every attempt of one task carries the same idempotency key, so a receiver that
deduplicates sees the result exactly once.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis

from pipeline import keys
from pipeline.codec import text
from pipeline.stores import lua

FINAL = ("delivered", "failed", "refused")


class CallbackOutbox:
    def __init__(self, r: redis.Redis, ttl_seconds: int) -> None:
        self._r = r
        self.ttl = ttl_seconds
        self._claim = lua.bind(r, lua.CALLBACK_CLAIM)

    def enqueue(self, task_id: str, url: str) -> bool:
        """Start the delivery of a finished task (once: later calls change nothing). True when
        this call created it."""
        key = keys.task_callback(task_id)
        pipe = self._r.pipeline(transaction=True)
        pipe.hsetnx(key, "state", "pending")
        pipe.hsetnx(key, "url", url)
        pipe.hsetnx(key, "idempotency_key", f"{task_id}:task-result")
        pipe.hsetnx(key, "attempts", 0)
        pipe.expire(key, self.ttl)
        pipe.zadd(keys.CALLBACKS_DUE, {task_id: time.time()}, nx=True)
        created = pipe.execute()[0]
        return bool(created)

    def claim(self, task_id: str, lease_seconds: float, max_attempts: int) -> tuple[str, int | str]:
        """('go', attempt number) when this caller should POST now; ('done', state) when the
        delivery has ended (``max_attempts`` made: it ends now, failed); ('busy', '') while
        another attempt is in progress."""
        verdict, value = self._claim(
            keys=[keys.task_callback(task_id), keys.task_callback_lease(task_id), keys.CALLBACKS_DUE],
            args=[task_id, int(lease_seconds * 1000), repr(time.time()), max_attempts])
        verdict = text(verdict)
        return verdict, int(value) if verdict == "go" else text(value)

    def finish(self, task_id: str, state: str, info: dict[str, Any]) -> None:
        """The delivery ended: delivered, refused by the receiver, or out of attempts."""
        assert state in FINAL
        pipe = self._r.pipeline(transaction=True)
        fields: dict[Any, Any] = {"state": state, "finished_at": repr(time.time()), **_fields(info)}
        pipe.hset(keys.task_callback(task_id), mapping=fields)
        pipe.zrem(keys.CALLBACKS_DUE, task_id)
        pipe.delete(keys.task_callback_lease(task_id))
        pipe.execute()

    def retry_at(self, task_id: str, when: float, info: dict[str, Any]) -> None:
        """The attempt failed and may succeed later: due again at ``when``."""
        pipe = self._r.pipeline(transaction=True)
        fields: dict[Any, Any] = {"state": "pending", "next_at": repr(when), **_fields(info)}
        pipe.hset(keys.task_callback(task_id), mapping=fields)
        pipe.zadd(keys.CALLBACKS_DUE, {task_id: when})
        pipe.delete(keys.task_callback_lease(task_id))
        pipe.execute()

    def due(self, late_by_seconds: float, limit: int = 1000) -> list[str]:
        """Deliveries due at least that long ago (lost retries, attempts whose worker died)."""
        members: list[bytes] = self._r.zrangebyscore(  # type: ignore[assignment]
            keys.CALLBACKS_DUE, "-inf", repr(time.time() - late_by_seconds), start=0, num=limit)
        return [text(m) for m in members]

    def record(self, task_id: str) -> dict[str, Any] | None:
        """What a task status shows: state, attempts, last answer (no secrets)."""
        raw: dict[Any, Any] = self._r.hgetall(keys.task_callback(task_id))
        if not raw:
            return None
        rec: dict[str, Any] = {text(k): text(v) for k, v in raw.items()}
        if "url" in rec:  # credentials in the URL are the receiver's: never shown or logged
            rec["url"] = without_userinfo(rec["url"])
        rec["attempts"] = int(rec.get("attempts", 0))
        if "status_code" in rec:
            rec["status_code"] = int(rec["status_code"])
        rec["delivered"] = rec.get("state") == "delivered"
        return rec


def _fields(info: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in info.items() if v is not None}


def without_userinfo(url: str) -> str:
    """``url`` with what may carry the receiver's secret masked: a ``user:password@`` and the
    query string (``?token=...``)."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        parts = parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1])
    if parts.query:
        parts = parts._replace(query="***")
    return urlunsplit(parts)
