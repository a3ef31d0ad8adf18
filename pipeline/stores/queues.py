"""Depths of the Celery stage queues, read the way kombu's Redis transport stores them: one list
per queue, plus one list per priority step (``<queue>\\x06\\x16<priority>``) when priorities
are used. Counts waiting messages only (a running task is not in its list)."""

from __future__ import annotations

from typing import Iterable

import redis

# kombu.transport.redis defaults (PRIORITY_STEPS, Channel.sep).
PRIORITY_STEPS = (0, 3, 6, 9)
PRIORITY_SEP = "\x06\x16"


def priority_lists(queue: str) -> list[str]:
    return [queue if p == 0 else f"{queue}{PRIORITY_SEP}{p}" for p in PRIORITY_STEPS]


def queue_depths(r: redis.Redis, queues: Iterable[str]) -> dict[str, int]:
    names = list(queues)
    pipe = r.pipeline(transaction=False)
    for q in names:
        for key in priority_lists(q):
            pipe.llen(key)
    counts = pipe.execute()
    n = len(PRIORITY_STEPS)
    return {q: int(sum(counts[i * n:(i + 1) * n])) for i, q in enumerate(names)}
