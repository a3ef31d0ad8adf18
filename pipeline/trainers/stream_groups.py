"""GRPO groups straight from the results stream: ``iter_groups(client, ...)`` yields a task's
``Group`` once all its sessions are in -- or as soon as ``early_stop_min_usable_sessions`` of
them are usable (the task's own setting, or ``min_usable`` here), not waiting for the rest,
which the server cancels (server-side early stop) and which are acked and dropped when they
arrive. Entries are acked after the consumer has taken the group (the loop body ran): a trainer
that dies holding a group gets its sessions again from the stream."""

from __future__ import annotations

from typing import Any, Iterator

from pipeline.trainers.groups import Group, usable

CLOSED_KEPT = 100_000  # a session can only arrive late for a recent group


def iter_groups(client: Any, *, group: str, consumer: str, min_usable: int | None = None,
                block_ms: int = 5000, stop_after: float | None = None) -> Iterator[Group]:
    held: dict[str, list[Any]] = {}  # task -> deliveries not yet acked
    usable_count: dict[str, int] = {}  # task -> how many of them are usable
    sizes: dict[str, tuple[int, int | None]] = {}  # task -> (num_samples, usable sessions that close it)
    closed: dict[str, None] = {}  # groups already yielded (their late sessions are dropped); the newest kept
    for item in client.results(group=group, consumer=consumer, block_ms=block_ms, stop_after=stop_after):
        result = item.result
        task_id = result.task_id
        if task_id in closed:
            item.ack()
            continue
        if task_id not in sizes:
            status = client.status(task_id, results=False)
            sizes[task_id] = (status.total_sessions, min_usable or status.early_stop_min_usable_sessions)
        held.setdefault(task_id, []).append(item)
        usable_count[task_id] = usable_count.get(task_id, 0) + usable(result)
        total, enough = sizes[task_id]
        if len(held[task_id]) >= total or (enough and usable_count[task_id] >= enough):
            yield Group(task_id, [d.result for d in held[task_id]], total)
            for delivery in held.pop(task_id):
                delivery.ack()
            usable_count.pop(task_id)
            closed[task_id] = None
            if len(closed) > CLOSED_KEPT:
                del closed[next(iter(closed))]
