"""A stage worker parses each session's spec from its Redis hash (``SessionStore.parse``). pydantic
-core caches the strings of the JSON it parses in a process-wide table of 16,384 entries unless
told not to: each session's id and its task's id stayed there, ~100 bytes per session in every
stage worker, API and proxy, until the table filled (some 13,000 sessions, ~1.3 MB a process)."""

from __future__ import annotations

import gc
import tracemalloc

from pipeline.schemas import SessionSpec, TaskRequest


def test_parsing_specs_keeps_none_of_their_ids():
    spec = SessionSpec.expand(TaskRequest.model_validate({"instruction": "x", "agent": {"custom_shell": "true"}}))[0]
    template = spec.model_dump_json()
    raws = [template.replace(spec.session_id, f"sess-{i:08d}").replace(spec.task_id, f"task-{i:08d}")
            for i in range(3000)]
    SessionSpec.model_validate_json(raws[0])  # the validator's own first-use allocations
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for raw in raws[1:]:
            SessionSpec.model_validate_json(raw)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    kept = sum(s.size_diff for s in after.compare_to(before, "filename") if s.size_diff > 0)
    # Cached: two strings of ~60 bytes per spec (~350 kB); not cached: nothing per spec.
    assert kept < 50_000, f"{kept} bytes kept after parsing 3,000 specs"
