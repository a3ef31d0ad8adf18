"""Where the API reads a finished session from: Redis while it keeps the session (the result
for ``result_ttl_seconds``, the raw records for ``records_ttl_seconds`` after publishing), else
its results file (``pipeline/results_dir.py``). Shared by the rollout routes and the viewer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline import results_dir
from pipeline.schemas import SessionResult
from pipeline.stores import Stores


class SessionSources:
    def __init__(self, stores: Stores, results_path: Path) -> None:
        self._stores = stores
        self._results = results_path

    def result(self, session_id: str) -> tuple[SessionResult, str] | None:
        """(the terminal result, "redis" or "file"); None when neither holds one."""
        result = self._stores.outputs.result(session_id)
        if result is not None:
            return result, "redis"
        data = self._file(session_id)
        return (data["result"], "file") if data else None

    def completions(self, session_id: str) -> tuple[dict[str, Any], str] | None:
        """({session_id, completions, errors, unreadable_records} as JSON values, source); None
        when there is no such finished session to read them from."""
        records = self._stores.records
        if records.kept(session_id):
            completions, bad = records.completions(session_id)
            return {"session_id": session_id, "completions": [c.model_dump(mode="json") for c in completions],
                    "errors": [e.model_dump(mode="json") for e in records.errors(session_id)],
                    "unreadable_records": bad}, "redis"
        data = self._file(session_id)
        if data:
            return {k: data[k] for k in ("session_id", "completions", "errors", "unreadable_records")}, "file"
        if self._stores.outputs.has_result(session_id):  # ended without a model call; no file (yet)
            return {"session_id": session_id, "completions": [], "errors": [], "unreadable_records": 0}, "redis"
        return None

    def _file(self, session_id: str) -> dict[str, Any]:
        path = results_dir.find(self._results, session_id, self._stores.sessions.task_id(session_id))
        return results_dir.read(path) if path is not None else {}
