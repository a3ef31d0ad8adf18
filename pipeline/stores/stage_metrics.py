"""Counters of what the stages did, kept in Redis so that any API replica's ``/metrics`` reports
the whole fleet without a worker serving HTTP: per stage, how its runs ended (``done``,
``skipped``, ``duplicate``, ``already-done``, ``missing``, ``failed``, ``lease-lost``) and how long they took (a
histogram: a count per bucket, and the sum); per terminal status, the sessions published. Two
hashes with a fixed set of fields (stages x results x buckets): bounded, never expiring.

A stage's end counts its run inside the script that ends it (``stage_runs.StageRuns.finish``), so
counting costs no round trip and no command of its own; a run that ends no stage (a duplicate, a
crash) is counted on its own.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

import redis

from pipeline import keys
from pipeline.codec import text
from pipeline.status import Stage

# Upper bounds (seconds) of the duration buckets: stages last from milliseconds (POSTRUN of a
# short session) to hours (RUN).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
           float("inf"))
RESULTS = ("done", "skipped", "duplicate", "already-done", "missing", "failed", "lease-lost")


def _bucket(seconds: float) -> str:
    bound = BUCKETS[bisect_left(BUCKETS, seconds)]
    return "+Inf" if bound == float("inf") else repr(bound)


def run_fields(stage: Stage, result: str, seconds: float | None) -> list[Any]:
    """The counting of one stage run that ended with ``result`` after ``seconds`` (None: not
    timed, e.g. a duplicate that never ran), as the STAGE_FINISH script takes it: the run's
    counter field, its bucket's field ('' untimed), the sum's field, the duration."""
    if seconds is None:
        return [f"{stage.value}|{result}", "", "", 0]
    return [f"{stage.value}|{result}", f"{stage.value}|le|{_bucket(seconds)}", f"{stage.value}|sum", repr(seconds)]


def queue_stage_run(pipe: Any, stage: Stage, result: str, seconds: float | None) -> None:
    """Add to ``pipe`` the counting of one stage run (for the paths that end no stage)."""
    run, bucket, total, value = run_fields(stage, result, seconds)
    pipe.hincrby(keys.STAGE_METRICS, run, 1)
    if bucket:
        pipe.hincrby(keys.STAGE_METRICS, bucket, 1)
        pipe.hincrbyfloat(keys.STAGE_METRICS, total, value)


def count_stage_run(r: redis.Redis, stage: Stage, result: str, seconds: float | None = None) -> None:
    """``queue_stage_run`` on its own (paths that make no other write: a duplicate, a crash);
    best effort -- a metric is never worth failing a stage for."""
    try:
        pipe = r.pipeline(transaction=False)
        queue_stage_run(pipe, stage, result, seconds)
        pipe.execute()
    except redis.RedisError:
        pass


def snapshot(r: redis.Redis) -> dict[str, Any]:
    """``{"runs": {stage: {result: n}}, "durations": {stage: {"buckets": [(le, cumulative n)],
    "sum": s, "count": n}}, "sessions": {status: n}}``"""
    raw: dict[Any, Any] = r.hgetall(keys.STAGE_METRICS)
    fields = {text(k): text(v) for k, v in raw.items()}
    runs = {s.value: {res: int(fields.get(f"{s.value}|{res}", 0)) for res in RESULTS} for s in Stage}
    durations = {}
    for s in Stage:
        cumulative, buckets = 0, []
        for bound in BUCKETS:
            label = "+Inf" if bound == float("inf") else repr(bound)
            cumulative += int(fields.get(f"{s.value}|le|{label}", 0))
            buckets.append((label, cumulative))
        durations[s.value] = {"buckets": buckets, "sum": float(fields.get(f"{s.value}|sum", 0.0)),
                              "count": cumulative}
    sessions = {text(k): int(v) for k, v in (r.hgetall(keys.SESSION_METRICS) or {}).items()}
    return {"runs": runs, "durations": durations, "sessions": sessions}
