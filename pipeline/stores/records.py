"""The completion records of a session (written by the proxy, read by POSTRUN and the verifier)
and the records of its failed model calls (kept apart: a failure is never a completion)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from pipeline import keys
from pipeline.codec import blob, unpack
from pipeline.schemas import CompletionRecord, UpstreamErrorRecord


@dataclass
class SessionRecords:
    completions: list[CompletionRecord]
    unreadable: int  # completion records that did not decode (counted, never trained on)
    errors: list[UpstreamErrorRecord]


class RecordStore:
    def __init__(self, r: redis.Redis, ttl_seconds: int) -> None:
        self._r = r
        self.ttl = ttl_seconds  # a session that never ends cannot leak its records

    # --- writes: commands the proxy sends inside its release round trip -----------------------

    def append_completion_commands(self, session_id: str, record: bytes) -> list[tuple[Any, ...]]:
        return self._append(keys.session_completions(session_id), record)

    def append_error_commands(self, session_id: str, record: bytes) -> list[tuple[Any, ...]]:
        return self._append(keys.session_errors(session_id), record)

    def _append(self, key: str, record: bytes) -> list[tuple[Any, ...]]:
        return [("RPUSH", key, record), ("EXPIRE", key, self.ttl)]

    def turn_commands(self, session_id: str, field: str, entry: bytes) -> list[tuple[Any, ...]]:
        """Record a turn a later call may continue (token-in sessions: proxy/splice.py)."""
        key = keys.session_turns(session_id)
        return [("HSET", key, field, entry), ("EXPIRE", key, self.ttl)]

    @staticmethod
    def turns_command(session_id: str) -> tuple[Any, ...]:
        return ("HGETALL", keys.session_turns(session_id))

    # --- reads -------------------------------------------------------------------------------

    def completions(self, session_id: str) -> tuple[list[CompletionRecord], int]:
        """The session's completion records in arrival order, and how many were unreadable (a
        corrupt record is counted, never silently trained on)."""
        return self.parse_completions(self._r.lrange(keys.session_completions(session_id), 0, -1))

    def queue_all(self, pipe: Any, session_id: str) -> None:
        """Add to ``pipe`` the two reads ``parse_all`` turns into completions and errors."""
        pipe.lrange(keys.session_completions(session_id), 0, -1)
        pipe.lrange(keys.session_errors(session_id), 0, -1)

    def parse_all(self, completions: list[Any], errors: list[Any]) -> SessionRecords:
        records, bad = self.parse_completions(completions)
        return SessionRecords(records, bad, [UpstreamErrorRecord.model_validate(unpack(blob(b))) for b in errors])

    def all(self, session_id: str) -> SessionRecords:
        """Completions and failed calls in one round trip."""
        pipe = self._r.pipeline(transaction=False)
        self.queue_all(pipe, session_id)
        return self.parse_all(*pipe.execute())

    @staticmethod
    def parse_completions(raws: list[Any]) -> tuple[list[CompletionRecord], int]:
        records, bad = [], 0
        for raw in raws:
            try:
                records.append(CompletionRecord.model_validate(unpack(blob(raw))))
            except Exception:
                bad += 1
        return records, bad

    def kept(self, session_id: str) -> bool:
        """Whether Redis still holds any record of the session (they expire after publishing)."""
        return bool(self._r.exists(keys.session_completions(session_id), keys.session_errors(session_id)))

    def errors(self, session_id: str) -> list[UpstreamErrorRecord]:
        return [UpstreamErrorRecord.model_validate(unpack(blob(b)))
                for b in self._r.lrange(keys.session_errors(session_id), 0, -1)]

    def expire(self, session_id: str, ttl_seconds: int, pipe: Any = None) -> None:
        """Raw records are large; once the result is out they only serve debugging. (``pipe``:
        queued on the caller's pipeline instead of sent now.)"""
        target = pipe if pipe is not None else self._r.pipeline(transaction=False)
        for key in (keys.session_completions(session_id), keys.session_errors(session_id), keys.session_turns(session_id)):
            target.expire(key, ttl_seconds)
        if pipe is None:
            target.execute()
