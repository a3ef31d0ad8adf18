"""What a results consumer group keeps in Redis beside the stream (``results_stream``): each
entry's hand-overs to the trainer (``hand``/``unhand``, what ``max_deliveries`` is checked
against), the sessions it has acked (``ack_delivered``/``delivered``: de-duplication across
restarts), and the GRPO groups it has taken or lost sessions of (``close_task``,
``task_closed``, ``lost_sessions``). A mixin of ``ResultsStream``, kept apart so the stream's
publishing, trimming and reading are read without the group's ledger.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis

from pipeline import keys

log = logging.getLogger("polar.results")


class GroupLedger:
    """``ResultsStream``'s per-group bookkeeping; ``_r`` and ``stream`` are ``ResultsStream``'s."""

    _r: redis.Redis
    stream: str

    def hand(self, group: str, entry_id: str, keep_seconds: float) -> int:
        """Count one hand-over of ``entry_id`` to the group's trainer; returns how many so far
        (what ``max_deliveries`` is checked against; forgotten at its ack)."""
        key = keys.results_handed(group)
        pipe = self._r.pipeline(transaction=False)
        pipe.hincrby(key, entry_id, 1)
        pipe.expire(key, int(keep_seconds) + 1)
        return int(pipe.execute()[0])

    def holder(self, group: str, entry_id: str, session_id: str) -> tuple[str | None, bool]:
        """Which consumer of ``group`` holds ``entry_id`` now (None: none, it was acked), and
        whether ``group`` has acked ``session_id`` (``ack_delivered``): checked as an entry is
        handed over, for a consumer that stalled (stopped, frozen) past its claim time while
        others claimed and acked the entries it had read ahead."""
        pipe = self._r.pipeline(transaction=False)
        pipe.xpending_range(self.stream, group, min=entry_id, max=entry_id, count=1)
        pipe.zscore(keys.results_delivered(group), session_id or "\0")
        rows, score = pipe.execute()
        name = rows[0]["consumer"] if rows else None
        return (name.decode() if isinstance(name, bytes) else name), score is not None

    def unhand(self, group: str, entry_id: str) -> None:
        """Take back the last count of ``hand`` (the trainer only holds the entry)."""
        self._r.hincrby(keys.results_handed(group), entry_id, -1)

    def ack_delivered(self, group: str, entry_id: str, session_id: str, keep_seconds: float) -> None:
        """Ack an entry the consumer has safely taken, remembering its session for
        de-duplication. The mark goes first: a crash before the XACK leaves an entry that a
        restart skips as already delivered, never one delivered twice."""
        key, now = keys.results_delivered(group), time.time()
        pipe = self._r.pipeline(transaction=False)
        if session_id:
            pipe.zadd(key, {session_id: now})
            pipe.zremrangebyscore(key, "-inf", now - keep_seconds)
            pipe.expire(key, int(keep_seconds) + 1)
        pipe.xack(self.stream, group, entry_id)
        pipe.hdel(keys.results_handed(group), entry_id)
        acked_where_group_exists(pipe.execute(raise_on_error=False), group)

    def close_task(self, group: str, task_id: str, keep_seconds: float, created_at: float | None = None) -> None:
        """Remember that ``group`` has taken ``task_id``'s whole GRPO group (``iter_groups``);
        ``created_at``: when that task was submitted (``TaskStatus.created_at``), which tells its
        sessions from those of a later task under the same id."""
        key, now = keys.results_closed_tasks(group), time.time()
        pipe = self._r.pipeline(transaction=False)
        pipe.zadd(key, {task_id: now if created_at is None else created_at})
        pipe.zremrangebyscore(key, "-inf", now - keep_seconds)
        pipe.expire(key, int(keep_seconds) + 1)
        pipe.delete(keys.results_lost(group, task_id))  # (its sessions lost: no longer waited for)
        pipe.execute()

    def lost_sessions(self, group: str, task_id: str, add: str | None = None,
                      keep_seconds: float = 7 * 24 * 3600) -> int:
        """How many of ``task_id``'s sessions ``group`` dead-lettered while its GRPO group was
        open, after adding ``add`` (an entry's session id) when given."""
        key = keys.results_lost(group, task_id)
        if add is None:
            return int(self._r.scard(key))
        pipe = self._r.pipeline(transaction=False)
        pipe.sadd(key, add)
        pipe.expire(key, int(keep_seconds) + 1)
        pipe.scard(key)
        return int(pipe.execute()[-1])

    def task_closed(self, group: str, task_id: str) -> float | None:
        """When the task ``group`` closed under ``task_id`` was created (or closed, for a mark
        written without it); None when ``group`` closed no task of that id."""
        score = self._r.zscore(keys.results_closed_tasks(group), task_id)
        return None if score is None else float(score)

    def delivered(self, group: str, session_ids: list[str]) -> set[str]:
        """Which of ``session_ids`` this group has already acked (within the kept window)."""
        if not session_ids:
            return set()
        scores = self._r.zmscore(keys.results_delivered(group), session_ids)
        return {sid for sid, score in zip(session_ids, scores) if score is not None}


def no_group(exc: BaseException) -> bool:
    """Whether Redis refused a command because the consumer group (or its stream) does not exist."""
    return isinstance(exc, redis.ResponseError) and str(exc).startswith("NOGROUP")


def acked_where_group_exists(replies: list[Any], group: str) -> list[Any]:
    """A pipeline's replies, run with ``raise_on_error=False``, raised as ``execute`` would, except
    an XACK refused because the group is gone (Redis lost it, or it was destroyed): nothing is
    pending there to ack, and the session's ``delivered`` mark, written first, keeps it from
    being delivered again when the group is made anew (``RolloutClient.results``)."""
    for reply in replies:
        if isinstance(reply, Exception):
            if not no_group(reply):
                raise reply
            log.warning("results stream: acked into consumer group %s, which is gone (%s)", group, reply)
    return replies
