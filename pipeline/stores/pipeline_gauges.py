"""What the pipeline holds right now, read from Redis in one pass (for /metrics): stage queue
depths, stages in flight (held leases), the READY buffer, tasks by state, the results stream,
and the stages' counters (``stage_metrics``: runs by result, durations, sessions by status)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import redis

from pipeline import keys
from pipeline.codec import text
from pipeline.status import Stage
from pipeline.stores import stage_metrics
from pipeline.stores.queues import queue_depths


def stages_in_flight(r: redis.Redis) -> dict[str, int]:
    """Held stage leases by stage (members are ``<stage>:<session>``; one per running stage)."""
    members: list[bytes] = r.zrange(keys.LEASE_EXPIRY, 0, -1)  # type: ignore[assignment]
    counts = Counter(text(m).split(":", 1)[0] for m in members)
    return {s.value: counts.get(s.value, 0) for s in Stage}


def snapshot(r: redis.Redis, stores: Any) -> dict[str, Any]:
    depths = queue_depths(r, [s.queue for s in Stage])
    return {
        "queue_depth": {s.value: depths[s.queue] for s in Stage},
        "in_flight": stages_in_flight(r),
        "ready": stores.ready.snapshot(),
        "tasks": stores.tasks.state_counts(),
        "results": stores.results.stats(),
        **stage_metrics.snapshot(r),  # runs by result, durations, sessions by status
    }
