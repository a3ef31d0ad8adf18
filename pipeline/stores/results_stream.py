"""The results stream: one result blob (``pipeline/blobs``, docs/result-blobs.md) per terminal
session. Entries carry ``session_id``, ``task_id``, ``schema_version`` and ``blob_version`` beside
the blob, so a consumer can route or skip an entry without decoding it; reading decodes lazily:
``StreamEntry.arrays`` for numpy views, ``.result`` for the pydantic model.

Publishing is guarded by a per-session marker so a redelivered callback stage does not append
again. The marker is written after XADD, so a crash in that microsecond window can still produce
a second entry; consumers therefore also de-duplicate on ``session_id`` (the trainer client does).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import redis

from pipeline import keys
from pipeline.blobs import BLOB_VERSION, ResultArrays, decode_arrays, decode_result, encode_result
from pipeline.codec import blob, text
from pipeline.schemas import SessionResult

_PENDING = b"pending:"
PUBLISH_CLAIM_SECONDS = 60


@dataclass(frozen=True)
class StreamEntry:
    entry_id: str
    session_id: str
    blob: bytes

    @cached_property
    def result(self) -> SessionResult:
        return decode_result(self.blob)

    @cached_property
    def arrays(self) -> ResultArrays:
        """The result with each trace's ids, mask and logprobs as numpy views of the blob."""
        return decode_arrays(self.blob)


class ResultsStream:
    def __init__(self, r: redis.Redis, *, maxlen: int = 1_000_000, stream: str = keys.RESULTS_STREAM,
                 marker_ttl_seconds: int = 7 * 24 * 3600):
        self._r = r
        self.maxlen = maxlen
        self.stream = stream
        self.marker_ttl = marker_ttl_seconds

    # --- producer ----------------------------------------------------------------------------

    def publish_once(self, result: SessionResult) -> str | None:
        """Append ``result`` unless this session was already published; returns the entry id
        (None while another process is publishing the same session right now)."""
        marker = keys.session_published(result.session_id)
        for _ in range(3):
            raw = self._r.get(marker)
            current = blob(raw) if raw is not None else None
            if current and not current.startswith(_PENDING):
                return current.decode()
            claim = _PENDING + uuid.uuid4().hex.encode()
            if self._r.set(marker, claim, nx=True, ex=PUBLISH_CLAIM_SECONDS):
                break
            if current and current.startswith(_PENDING):
                return None  # a live publisher holds the claim; its stage will finish the job
        else:
            return None
        entry_id = text(self._r.xadd(
            self.stream,
            {"data": encode_result(result), "session_id": result.session_id, "task_id": result.task_id,
             "schema_version": str(result.schema_version), "blob_version": str(BLOB_VERSION)},
            maxlen=self.maxlen,
            approximate=True,
        ))
        self._r.set(marker, entry_id, ex=self.marker_ttl)
        return entry_id

    def published_id(self, session_id: str) -> str | None:
        v = self._r.get(keys.session_published(session_id))
        return None if v is None or blob(v).startswith(_PENDING) else text(v)

    # --- consumer ----------------------------------------------------------------------------

    def ensure_group(self, group: str) -> None:
        try:
            # id=0: entries published before the group existed are delivered too.
            self._r.xgroup_create(self.stream, group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def read(self, group: str, consumer: str, *, pending: bool, count: int = 16,
             block_ms: int | None = 1000) -> list[StreamEntry]:
        """``pending=True`` re-reads this consumer's unacked entries; else new ones (blocking)."""
        resp: Any = self._r.xreadgroup(group, consumer, {self.stream: "0" if pending else ">"},
                                  count=count, block=None if pending else block_ms)
        return [e for _, entries in (resp or []) for e in map(_entry, entries) if e is not None]

    def claim_stale(self, group: str, consumer: str, min_idle_ms: int, count: int = 16) -> list[StreamEntry]:
        """Take over entries another consumer read but never acked (it died)."""
        reply: Any = self._r.xautoclaim(self.stream, group, consumer, min_idle_ms, start_id="0-0", count=count)
        entries = reply[1]
        return [e for e in map(_entry, entries) if e is not None]

    def ack(self, group: str, *entry_ids: str) -> int:
        return int(self._r.xack(self.stream, group, *entry_ids)) if entry_ids else 0

    def lag(self, group: str) -> int | None:
        for g in self._r.xinfo_groups(self.stream):
            if g["name"].decode() == group:
                lag = g.get("lag")
                return None if lag is None else int(lag)
        return None


def _entry(reply: tuple) -> StreamEntry | None:
    entry_id, fields = reply
    if not fields:  # deleted by trimming while pending
        return None
    data = blob(fields[b"data"])
    session_id = fields.get(b"session_id")
    return StreamEntry(text(entry_id), text(session_id) if session_id else decode_arrays(data).session_id, data)


