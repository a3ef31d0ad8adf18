"""What the stages produce for one session: the trajectory (POSTRUN, rewarded by EVALUATE) and
the terminal ``SessionResult`` (EVALUATE, published by CALLBACK, kept for polling). Both are
result blobs (``pipeline/blobs``) in the configured layout; blobs of every earlier version decode."""

from __future__ import annotations

from typing import Any

import redis

from pipeline import keys
from pipeline.blobs import decode_result, decode_trajectory, encode_result, encode_trajectory, summary_from_blob
from pipeline.codec import blob
from pipeline.schemas import SessionResult, SessionSummary, Trajectory


class OutputStore:
    def __init__(self, r: redis.Redis, ttl_seconds: int, layout: str = "compact") -> None:
        self._r = r
        self.ttl = ttl_seconds
        self.layout = layout

    def save_trajectory(self, session_id: str, trajectory: Trajectory, pipe: Any = None) -> None:
        """(``pipe``: queued on the caller's pipeline, e.g. a stage's end, instead of sent now.)"""
        key, value, ttl = self.trajectory_put(session_id, trajectory)
        (pipe if pipe is not None else self._r).set(key, value, ex=ttl)

    def trajectory_put(self, session_id: str, trajectory: Trajectory) -> tuple[str, bytes, int]:
        """The trajectory as a stage's fenced output (``Handoff.puts``)."""
        return keys.session_trajectory(session_id), encode_trajectory(trajectory, self.layout), self.ttl

    def trajectory(self, session_id: str) -> Trajectory | None:
        return self.parse_trajectory(self._r.get(keys.session_trajectory(session_id)))

    def encode_result(self, result: SessionResult) -> bytes:
        return encode_result(result, self.layout)

    def save_result(self, session_id: str, result: SessionResult, pipe: Any = None, data: bytes | None = None) -> None:
        """(``data``: ``result`` already encoded by ``encode_result``, e.g. to publish the same bytes.)"""
        (pipe if pipe is not None else self._r).set(keys.session_result(session_id),
                                                     data if data is not None else encode_result(result, self.layout),
                                                     ex=self.ttl)

    def result_put(self, session_id: str, result: SessionResult) -> tuple[str, bytes, int]:
        """The result as a stage's fenced output (``Handoff.puts``)."""
        return keys.session_result(session_id), encode_result(result, self.layout), self.ttl

    def result(self, session_id: str) -> SessionResult | None:
        return self.parse_result(self._r.get(keys.session_result(session_id)))

    def has_result(self, session_id: str) -> bool:
        return bool(self._r.exists(keys.session_result(session_id)))

    def queue_result(self, pipe: Any, session_id: str) -> None:
        """Add to ``pipe`` the read that ``parse_result`` or ``parse_summary`` decodes."""
        pipe.get(keys.session_result(session_id))

    @staticmethod
    def parse_result(raw: bytes | str | None) -> SessionResult | None:
        return decode_result(blob(raw)) if raw is not None else None

    @staticmethod
    def parse_summary(raw: bytes | str | None) -> SessionSummary | None:
        """The result's summary, its token counts read from the arrays: no trace is built."""
        return summary_from_blob(blob(raw)) if raw is not None else None

    def expire_trajectory(self, session_id: str, ttl_seconds: int, pipe: Any = None) -> None:
        (pipe if pipe is not None else self._r).expire(keys.session_trajectory(session_id), ttl_seconds)

    def queue_trajectory(self, pipe: Any, session_id: str) -> None:
        """Add to ``pipe`` the read ``parse_trajectory`` decodes."""
        pipe.get(keys.session_trajectory(session_id))

    @staticmethod
    def parse_trajectory(raw: bytes | str | None) -> Trajectory | None:
        return decode_trajectory(blob(raw)) if raw else None
