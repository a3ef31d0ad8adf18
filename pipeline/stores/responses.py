"""Responses-API state per session, so ``previous_response_id`` works (``store: false`` skips it):
each stored response with its conversation and own input items, and every stored item by id
(what an ``item_reference`` input names)."""

from __future__ import annotations

from typing import Any, Mapping

import redis

from pipeline import codec, keys
from pipeline.codec import pack, unpack


class ResponseStore:
    def __init__(self, r: redis.Redis, ttl_seconds: int) -> None:
        self._r = r
        self.ttl = ttl_seconds

    def save(self, session_id: str, response: dict[str, Any], conversation: list[dict[str, Any]],
             input_items: list[dict[str, Any]] | None = None,
             items: Mapping[str, dict[str, Any]] | None = None) -> None:
        key, items_key = keys.session_responses(session_id), keys.session_response_items(session_id)
        pipe = self._r.pipeline(transaction=True)  # a response and its items are kept together
        pipe.hset(key, response["id"], pack({"response": response, "conversation": conversation,
                                             "input": input_items or [], "item_ids": list(items or ())}))
        pipe.expire(key, self.ttl)
        if items:
            pipe.hset(items_key, mapping={item_id: pack(item) for item_id, item in items.items()})
            pipe.expire(items_key, self.ttl)
        pipe.execute()

    def delete(self, session_id: str, response_id: str) -> bool:
        """Forget a response and the items it brought (its input's and output's)."""
        stored = self.load(session_id, response_id)
        if stored is None:
            return False
        pipe = self._r.pipeline(transaction=True)
        pipe.hdel(keys.session_responses(session_id), response_id)
        if stored.get("item_ids"):  # exactly what save indexed
            pipe.hdel(keys.session_response_items(session_id), *stored["item_ids"])
        return bool(pipe.execute()[0])

    def load(self, session_id: str, response_id: str) -> dict[str, Any] | None:
        raw = self._r.hget(keys.session_responses(session_id), response_id)
        return unpack(codec.blob(raw)) if raw else None

    def items(self, session_id: str, item_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The stored items of these ids that exist."""
        if not item_ids:
            return {}
        raws = self._r.hmget(keys.session_response_items(session_id), item_ids)
        return {i: unpack(codec.blob(raw)) for i, raw in zip(item_ids, raws) if raw}
