"""What the stages produce for one session: the trajectory (POSTRUN, rewarded by EVALUATE) and
the terminal ``SessionResult`` (EVALUATE, published by CALLBACK, kept for polling)."""

from __future__ import annotations

from typing import Any

import redis

from pipeline import keys
from pipeline.codec import blob, pack, unpack
from pipeline.schemas import SessionResult, Trajectory


class OutputStore:
    def __init__(self, r: redis.Redis, ttl_seconds: int) -> None:
        self._r = r
        self.ttl = ttl_seconds

    def save_trajectory(self, session_id: str, trajectory: Trajectory) -> None:
        self._r.set(keys.session_trajectory(session_id), pack(trajectory), ex=self.ttl)

    def trajectory(self, session_id: str) -> Trajectory | None:
        raw = self._r.get(keys.session_trajectory(session_id))
        return Trajectory.model_validate(unpack(blob(raw))) if raw else None

    def save_result(self, session_id: str, result: SessionResult) -> None:
        self._r.set(keys.session_result(session_id), pack(result), ex=self.ttl)

    def result(self, session_id: str) -> SessionResult | None:
        return self.parse_result(self._r.get(keys.session_result(session_id)))

    def has_result(self, session_id: str) -> bool:
        return bool(self._r.exists(keys.session_result(session_id)))

    def queue_result(self, pipe: Any, session_id: str) -> None:
        """Add to ``pipe`` the read that ``parse_result`` decodes."""
        pipe.get(keys.session_result(session_id))

    @staticmethod
    def parse_result(raw: bytes | str | None) -> SessionResult | None:
        return SessionResult.model_validate(unpack(blob(raw))) if raw is not None else None

    def expire_trajectory(self, session_id: str, ttl_seconds: int) -> None:
        self._r.expire(keys.session_trajectory(session_id), ttl_seconds)
