"""Celery's stage queues, read the way kombu's Redis transport stores them: one list per queue,
plus one list per priority step (``<queue>\\x06\\x16<priority>``) when priorities are used.
``queue_depths`` counts waiting messages (a running task is not in its list); ``queued`` looks for
one session's message in a queue (bounded: the reaper's check for a lost message)."""

from __future__ import annotations

from typing import Iterable

import redis

from pipeline.messages import PRIORITY_STEPS, queue_key


def priority_lists(queue: str) -> list[str]:
    return [queue_key(queue, p) for p in PRIORITY_STEPS]


def queue_depths(r: redis.Redis, queues: Iterable[str]) -> dict[str, int]:
    names = list(queues)
    pipe = r.pipeline(transaction=False)
    for q in names:
        for key in priority_lists(q):
            pipe.llen(key)
    counts = pipe.execute()
    n = len(PRIORITY_STEPS)
    return {q: int(sum(counts[i * n:(i + 1) * n])) for i, q in enumerate(names)}


def queued(r: redis.Redis, queue: str, session_id: str, scan_limit: int = 50_000) -> bool | None:
    """Whether a message for ``session_id`` waits in ``queue`` (None: the queue is longer than
    ``scan_limit``, so it cannot be told cheaply)."""
    needle = session_id.encode()
    for key in priority_lists(queue):
        n = int(r.llen(key))
        if n > scan_limit:
            return None
        for start in range(0, n, 1000):
            items: list[bytes] = r.lrange(key, start, start + 999)  # type: ignore[assignment]
            if any(needle in item for item in items):
                return True
    return False
