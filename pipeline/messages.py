"""Stage messages as they lie in the broker: a Celery task message (protocol 2, JSON) in kombu's
Redis envelope, built here so that a stage script can push the next stage's message in the same
atomic step that records the stage done (``stores/lua/`` STAGE_FINISH) -- and without Celery's
publishing path, which costs about a millisecond of CPU per message (a producer, a channel, a
new Redis client per publish).

What ``app.send_task(name, args=[session_id], queue=queue, priority=p)`` would push, the fields
that vary (ids, origin) aside; ``tests/redis/test_stage_messages.py`` checks it against Celery's
own message, so a Celery or kombu upgrade that changes the format fails there first. Pure: no
I/O, no Celery import.
"""

from __future__ import annotations

import base64
import os
import socket
import uuid
from bisect import bisect
from typing import Any

import orjson

# kombu's Redis transport: a message of priority p > 0 goes to the list "<queue>\x06\x16<step>",
# step the largest of PRIORITY_STEPS <= p (workers pop the lists in step order: 0 first).
PRIORITY_STEPS = (0, 3, 6, 9)
PRIORITY_SEP = "\x06\x16"
_ORIGIN = f"{os.getpid()}@{socket.gethostname()}"
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def init_priority(dispatch_priority: int) -> int:
    """Polar's dispatch_priority (0-100, higher first) as a message priority on the Redis broker,
    where 0 is served first and kombu keeps steps 0, 3, 6, 9: 100 -> 0 ... 0 -> 9. (Other stages'
    messages carry none, which is 0: a session already started is never held behind new ones.)"""
    return 9 - round(max(0, min(100, dispatch_priority)) * 9 / 100)


def queue_key(queue: str, priority: int = 0) -> str:
    """The Redis list a message of ``priority`` waits in (kombu's ``_q_for_pri``)."""
    step = PRIORITY_STEPS[bisect(PRIORITY_STEPS, max(0, min(9, priority))) - 1]
    return f"{queue}{PRIORITY_SEP}{step}" if step else queue


def stage_message(task_name: str, session_id: str, queue: str, priority: int = 0,
                  task_id: str | None = None) -> bytes:
    """The broker payload of one stage task for ``session_id`` (JSON bytes, LPUSHed to
    ``queue_key(queue, priority)``)."""
    tid = task_id or str(uuid.uuid4())
    body = orjson.dumps([[session_id], {}, _EMBED])
    headers: dict[str, Any] = {
        "lang": "py", "task": task_name, "id": tid, "shadow": None, "eta": None, "expires": None,
        "group": None, "group_index": None, "retries": 0, "timelimit": [None, None], "root_id": tid,
        "parent_id": None, "argsrepr": repr([session_id]), "kwargsrepr": "{}", "origin": _ORIGIN,
        "ignore_result": None, "replaced_task_nesting": 0, "stamped_headers": None, "stamps": {},
    }
    return orjson.dumps({
        "body": base64.b64encode(body).decode(), "content-encoding": "utf-8",
        "content-type": "application/json", "headers": headers,
        "properties": {"correlation_id": tid, "reply_to": None, "delivery_mode": 2,
                       "delivery_info": {"exchange": "", "routing_key": queue}, "priority": priority,
                       "body_encoding": "base64", "delivery_tag": str(uuid.uuid4())},
    })
