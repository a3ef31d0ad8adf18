"""Responses-API state per session, so ``previous_response_id`` works (``store: false`` skips it)."""

from __future__ import annotations

from typing import Any

import redis

from pipeline import codec, keys
from pipeline.codec import pack, unpack


class ResponseStore:
    def __init__(self, r: redis.Redis, ttl_seconds: int) -> None:
        self._r = r
        self.ttl = ttl_seconds

    def save(self, session_id: str, response: dict[str, Any], conversation: list[dict[str, Any]]) -> None:
        key = keys.session_responses(session_id)
        pipe = self._r.pipeline(transaction=False)
        pipe.hset(key, response["id"], pack({"response": response, "conversation": conversation}))
        pipe.expire(key, self.ttl)
        pipe.execute()

    def delete(self, session_id: str, response_id: str) -> bool:
        return bool(self._r.hdel(keys.session_responses(session_id), response_id))

    def load(self, session_id: str, response_id: str) -> dict[str, Any] | None:
        raw = self._r.hget(keys.session_responses(session_id), response_id)
        return unpack(codec.blob(raw)) if raw else None
