"""GRPO groups straight from the results stream: ``iter_groups(client, ...)`` yields a task's
``Group`` once all its sessions are in -- or as soon as ``early_stop_min_usable_sessions`` of
them are usable (the task's own setting, or ``min_usable`` here), not waiting for the rest,
which the server cancels (server-side early stop) and which are acked and dropped when they
arrive, also after a restart (the closed tasks are kept in Redis, a week). A session whose entry
went to the dead-letter stream counts as arrived: its group comes without it (``Group.complete``
false) instead of waiting for it for ever. A session whose entry was trimmed from the stream
before the consumer group existed (``RolloutClient.missed_entries``) comes from the API instead,
so its group comes whole rather than never. A task id submitted
again once its first task expired from the API is a new group: a session is told from the closed
task's by when it was registered (``SessionTiming.registered_at`` against the task's ``created_at``).

Acks: a group's entries are acked when the loop asks for the next group, or when the loop body
calls ``group.ack()`` -- do that before a ``break`` that keeps the group (a generator cannot tell
a ``break`` from an exception, and a training step that raises must get its group again). A
group neither acked nor followed by another comes again from the stream, to this consumer on
its restart. A group's size comes from the API (the task's status): while the API is down or
answers 5xx, the loop waits and retries, as ``results()`` does for Redis, rather than ending.

One consumer per consumer group: a consumer group spreads its entries over its consumers, so
two consumers of one group would each hold part of a task's sessions and neither could close
it. Give each trainer process its own consumer group (and expect each to see every group); a
second live consumer of the group is named in an error log at each new task.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any, Iterator

from pipeline.client import api_outage, same_task
from pipeline.trainers.groups import Group, usable

log = logging.getLogger("polar.trainers")

CLOSED_KEPT = 100_000  # a session can only arrive late for a recent group
API_RETRY_FIRST_SECONDS, API_RETRY_MAX_SECONDS = 0.5, 30.0  # an API restart or outage is waited out


def iter_groups(client: Any, *, group: str, consumer: str, min_usable: int | None = None,
                block_ms: int = 5000, stop_after: float | None = None) -> Iterator[Group]:
    held: dict[str, list[Any]] = {}  # task -> deliveries not yet acked
    usable_count: dict[str, int] = {}  # task -> how many of them are usable
    sizes: dict[str, tuple[int, int | None, float | None]] = {}  # task -> (num_samples, usable sessions that
    #   close it, created_at)
    closed: dict[str, float | None] = {}  # groups already yielded -> their task's created_at (their late
    #   sessions are dropped; a later task under the same id is not); the newest kept
    lost: dict[str, int] = {}  # task -> its sessions whose entries were dead-lettered (they will not come)
    recovered: dict[str, list[Any]] = {}  # task -> the API's results of its sessions trimmed from the stream
    shared: set[str] = set()  # other live consumers of the consumer group, warned about
    for item in client.results(group=group, consumer=consumer, block_ms=block_ms, stop_after=stop_after,
                               dead_letters=True):
        if item.dead_letter is not None:
            task_id = item.entry.task_id
            first = task_id not in sizes
            if not task_id or task_id in closed or (first and not _size_known(client, group, task_id, min_usable, sizes)):
                continue  # (an entry naming no task, or a group already taken or gone: nothing waits for it)
            if first:
                recovered[task_id] = _trimmed_results(client, group, task_id)
            # (a task first heard of here: the lost ones are all counted by the add)
            lost[task_id] = client.lost_sessions(group, task_id, add=item.entry.session_id or item.entry_id)
            log.warning("iter_groups: a session of task %s was dead-lettered (%s): its group comes without it",
                        task_id, item.dead_letter)
            if lost[task_id] + len(held.get(task_id, ())) + len(recovered[task_id]) >= sizes[task_id][0]:
                yield from _take(client, group, task_id, held, usable_count, sizes, lost, closed, recovered)
            continue
        result = item.result
        task_id = result.task_id
        registered_at = result.timing.registered_at
        if task_id in closed and not same_task(closed[task_id], registered_at):
            del closed[task_id]  # the id was submitted again, once its first task expired: a new group
        if task_id not in closed and task_id not in sizes:
            _warn_if_shared(client, group, consumer, shared)
            if _size_known(client, group, task_id, min_usable, sizes, registered_at):
                lost[task_id] = client.lost_sessions(group, task_id)  # (dead-lettered before a restart)
                recovered[task_id] = _trimmed_results(client, group, task_id)
                usable_count[task_id] = sum(usable(x) for x in recovered[task_id])
            else:
                _close(closed, task_id, registered_at)  # (a task's sessions are registered as it is created)
        if task_id in closed or any(x.session_id == result.session_id for x in recovered[task_id]):
            item.ack()  # (a group taken; or a second entry of a session the API gave already)
            continue
        held.setdefault(task_id, []).append(item)
        usable_count[task_id] = usable_count.get(task_id, 0) + usable(result)
        total, enough, _ = sizes[task_id]
        if (len(held[task_id]) + lost.get(task_id, 0) + len(recovered[task_id]) >= total
                or (enough and usable_count[task_id] >= enough)):
            yield from _take(client, group, task_id, held, usable_count, sizes, lost, closed, recovered)
        else:
            item.hold()  # kept for its group, not worked on: a restart meanwhile is no failed delivery
    if held:
        log.warning("iter_groups(%s/%s) stopped with incomplete groups, unacked (another consumer of the group may "
                    "hold their other sessions): %s", group, consumer,
                    {t: f"{len(d)}/{sizes[t][0]}" for t, d in held.items()})


def _trimmed_results(client: Any, group: str, task_id: str) -> list[Any]:
    """The API's results of ``task_id``'s sessions whose entries were trimmed from the stream
    before the consumer group existed (``missed_entries``): the group never reads them, and
    their GRPO group waited for them for ever -- its other sessions held unacked, which also
    keeps every later entry from being trimmed. Asked only of a group that missed entries."""
    if client.missed_entries(group) == 0:
        return []
    backoff = API_RETRY_FIRST_SECONDS
    while True:
        try:  # (the finished sessions' ids first: only those gone are fetched whole)
            finished = [x.session_id for x in client.status(task_id, results=False).sessions if x.status.is_terminal()]
            gone = client.gone_from_stream(finished) if finished else set()
            results = [client.session(sid) for sid in sorted(gone)]
            break
        except Exception as exc:
            if not api_outage(exc):
                raise
            log.warning("iter_groups: the API cannot give task %s's results (%s); retrying in %.1fs", task_id, exc,
                        backoff)
            time.sleep(backoff)
            backoff = min(API_RETRY_MAX_SECONDS, backoff * 2)
    if gone:
        log.warning("iter_groups: %d session(s) of task %s were trimmed from the results stream before consumer group "
                    "%s existed: taken from the API", len(gone), task_id, group)
    return results


def _warn_if_shared(client: Any, group: str, consumer: str, warned: set[str]) -> None:
    """Say so when another consumer of the consumer group reads too (checked at each new task):
    the two split each task's sessions, and neither may ever close a group -- a silent wait for
    ever without ``stop_after``."""
    others = set(client.live_consumers(group)) - {consumer} - warned
    if others:
        warned.update(others)
        log.error("iter_groups(%s/%s): consumer group %s is also read by %s: each consumer gets part of a task's "
                  "sessions, and a group whose sessions are split waits for ever. iter_groups needs one consumer per "
                  "consumer group: give each trainer process its own group", group, consumer, group, sorted(others))


def _take(client: Any, group: str, task_id: str, held: dict[str, list[Any]], usable_count: dict[str, int],
          sizes: dict[str, tuple[int, int | None, float | None]], lost: dict[str, int],
          closed: dict[str, float | None], recovered: dict[str, list[Any]]) -> Iterator[Group]:
    """Close ``task_id``'s group and yield it (none when every session of it was dead-lettered);
    its entries are acked when the loop asks for the next group, or by ``Group.ack``."""
    taken = held.pop(task_id, [])
    extra = recovered.pop(task_id, [])
    usable_count.pop(task_id, None)
    lost.pop(task_id, None)
    total, _, created_at = sizes.pop(task_id)
    _close(closed, task_id, created_at)
    ack = functools.partial(_ack_once, client, group, task_id, created_at, taken, [])
    if taken or extra:
        yield Group(task_id, [d.result for d in taken] + extra, total, on_ack=ack)
    ack()  # the loop asked for the next group: this one is taken


def _size_known(client: Any, group: str, task_id: str, min_usable: int | None,
                sizes: dict[str, tuple[int, int | None, float | None]], registered_at: float | None = None) -> bool:
    """Learn a task's group size; False when its group is closed already (taken before a restart:
    the task a session ``registered_at`` belongs to, not an earlier one of the same id) or the task
    is gone from the API (its records expired: nothing to group it by)."""
    if client.task_closed(group, task_id, registered_at):
        return False
    backoff = API_RETRY_FIRST_SECONDS
    while True:
        try:
            status = client.status(task_id, results=False)
            break
        except Exception as exc:
            if api_outage(exc):  # the API is restarting, unreachable or its Redis away: wait, as results() does
                code = getattr(exc, "status", None)
                reason = f"HTTP {code}" if code else f"{type(exc).__name__}: {exc}"
            elif getattr(exc, "status", None) == 404 and _unknown_task(exc):
                log.warning("iter_groups: task %s is unknown to the API (expired?): its results are dropped", task_id)
                return False
            else:
                raise  # any other 404 (a wrong api_url: no such route) or 4xx is not a verdict on the task
        log.warning("iter_groups: the API cannot give task %s's size (%s); retrying in %.1fs", task_id, reason, backoff)
        time.sleep(backoff)
        backoff = min(API_RETRY_MAX_SECONDS, backoff * 2)
    sizes[task_id] = (status.total_sessions, min_usable or status.early_stop_min_usable_sessions, status.created_at)
    return True


def _unknown_task(exc: Exception) -> bool:
    error = getattr(exc, "body", None)
    error = error.get("error") if isinstance(error, dict) else None
    return isinstance(error, dict) and str(error.get("message", "")).startswith("unknown task")


def _ack_once(client: Any, group: str, task_id: str, created_at: float | None, taken: list[Any],
              acked: list[bool]) -> None:
    if not acked:
        # first: a crash before the acks drops the group, never repeats it
        client.close_task(group, task_id, created_at=created_at)
        for delivery in taken:
            delivery.ack()
        acked.append(True)


def _close(closed: dict[str, float | None], task_id: str, created_at: float | None) -> None:
    closed.pop(task_id, None)  # (re-inserted: the newest kept)
    closed[task_id] = created_at
    if len(closed) > CLOSED_KEPT:
        del closed[next(iter(closed))]
