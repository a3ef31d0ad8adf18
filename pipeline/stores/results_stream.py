"""The results stream: one result blob (``pipeline/blobs``, docs/result-blobs.md) per terminal
session. Entries carry ``session_id``, ``task_id``, ``schema_version`` and ``blob_version`` beside
the blob, so a consumer can route or skip an entry without decoding it; reading decodes lazily:
``StreamEntry.arrays`` for numpy arrays, ``.result`` for the pydantic model.

Publishing is guarded by a per-session marker so a redelivered callback stage does not append
again. The marker is written after XADD, so a crash in that microsecond window can still produce
a second entry; consumers therefore also de-duplicate on ``session_id`` (the trainer client does,
against ``delivered``: the group's acked sessions, kept in Redis so a restart does not forget).

The stream is capped at ``maxlen``, but a trim never drops an entry a consumer group still needs
(pending, or not yet delivered): it stops at the slowest group and reports the backlog it had to
keep (an error log, ``keys.RESULTS_TRIM_HELD`` counted, ``keys.RESULTS_BACKLOG`` set). Entries a
group gives up on go to the dead-letter stream (``dead_letter``), never silently away.

A group's bookkeeping beside the stream (hand-over counts, acked sessions, closed and lost GRPO
groups) is the ``GroupLedger`` mixin in ``results_ledger``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import redis

from pipeline import keys
from pipeline.blobs import LAYOUTS, ResultArrays, decode_arrays, decode_result, encode_result
from pipeline.codec import blob, text
from pipeline.schemas import SessionResult
from pipeline.stores import lua
from pipeline.stores.results_ledger import GroupLedger, acked_where_group_exists

log = logging.getLogger("polar.results")
# The marker an older version's publisher set while it published (claim, XADD, marker): still
# honoured, so two versions side by side during an upgrade never publish a session twice.
_PENDING = b"pending:"
# Trim once this many entries past the cap: the stream's macro-node size (stream-node-max-entries
# 100 by default), the granularity at which an approximate trim removes anything at all.
TRIM_SLACK = 100
HELD_LOG_EVERY_SECONDS = 60.0


@dataclass(frozen=True)
class StreamEntry:
    entry_id: str
    session_id: str  # "" when the entry names none and its blob does not decode
    blob: bytes  # b"" when the entry was trimmed away while pending
    deliveries: int = 1  # times handed to the group's trainer, this one included (``hand``)
    task_id: str = ""  # as the entry names it ("" when it names none)

    @cached_property
    def result(self) -> SessionResult:
        return decode_result(self.blob)

    @cached_property
    def arrays(self) -> ResultArrays:
        """The result with each trace's ids, mask and logprobs as numpy arrays (views of the blob where stored plain)."""
        return decode_arrays(self.blob)


TOUCH_SLICE = 1000  # entry ids per RESULTS_TOUCH call


class ResultsStream(GroupLedger):
    def __init__(self, r: redis.Redis, *, maxlen: int = 1_000_000, stream: str = keys.RESULTS_STREAM,
                 marker_ttl_seconds: int = 7 * 24 * 3600, layout: str = "compact"):
        self._r = r
        self.layout = layout
        self.maxlen = maxlen
        self.stream = stream
        self.marker_ttl = marker_ttl_seconds
        self._touch = lua.bind(r, lua.RESULTS_TOUCH)

    # --- producer ----------------------------------------------------------------------------

    def publish_once(self, result: SessionResult) -> str | None:
        """Append ``result`` unless this session was already published; returns the entry id
        (None while a publisher of an older version holds its claim on the same session)."""
        replies = lua.execute(self._r, lambda pipe: self.queue_publish(pipe, result), transaction=False)
        return self.published(replies[0])

    def queue_publish(self, pipe: Any, result: SessionResult, data: bytes | None = None) -> None:
        """Add to ``pipe`` the atomic publish-once (RESULTS_PUBLISH_ONCE: the marker checked, the
        entry appended, the marker set); its reply goes to ``published``. ``data``: ``result``'s
        blob in this stream's layout when the caller has it already."""
        script = lua.RESULTS_PUBLISH_ONCE
        blob = data if data is not None else encode_result(result, self.layout)
        fields = {"data": blob, "session_id": result.session_id, "task_id": result.task_id,
                  "schema_version": str(result.schema_version), "blob_version": str(LAYOUTS[self.layout])}
        lua.queue(pipe, script, [keys.session_published(result.session_id), self.stream, keys.SESSION_METRICS],
                  [self.marker_ttl, _PENDING, result.status.value, *(x for kv in fields.items() for x in kv)])

    def published(self, reply: Any) -> str | None:
        """The entry id from a ``queue_publish`` reply; trims the stream when this entry took it
        past its cap."""
        entry_id, length = text(reply[0]), int(reply[1])
        if length >= self.maxlen + TRIM_SLACK:
            try:
                self.trim()
            except redis.ResponseError as exc:  # the entry is out; a failed trim is retried next time
                log.warning("results stream trim failed: %s", exc)
        return entry_id or None

    def trim(self) -> int:
        """Cap the stream near ``maxlen`` without dropping what a group still needs; returns the
        entries kept beyond the cap because of that (the backlog; 0 when none)."""
        length = int(self._r.xlen(self.stream))
        if length < self.maxlen + TRIM_SLACK:
            return 0
        need = self._needed_from()
        if need is None:  # no consumer group: nobody to wait for, nothing held back
            self._r.xtrim(self.stream, maxlen=self.maxlen, approximate=True)
            self._r.set(keys.RESULTS_BACKLOG, 0)
            return 0
        # MINID ~ with LIMIT: at most the excess, and never an entry at or past ``need``.
        self._r.execute_command("XTRIM", self.stream, "MINID", "~", need, "LIMIT", length - self.maxlen)
        # What is left over the cap, read after the trim: the other publishers trim at the same
        # moment, and a length read before it, less what this call removed, counted theirs as held.
        backlog = int(self._r.xlen(self.stream)) - self.maxlen
        if backlog <= TRIM_SLACK:
            self._r.set(keys.RESULTS_BACKLOG, 0)
            return 0
        pipe = self._r.pipeline(transaction=False)
        pipe.incr(keys.RESULTS_TRIM_HELD)
        pipe.set(keys.RESULTS_BACKLOG, backlog)
        pipe.execute()
        now = time.monotonic()
        if now - _last_held_log[0] > HELD_LOG_EVERY_SECONDS:  # every trim is counted; logs rate-limited
            _last_held_log[0] = now
            log.error("results stream: %d entries over POLAR_RESULTS_STREAM_MAXLEN=%d kept because a consumer "
                      "group has not read or acked them (from %s); a slow or abandoned group? "
                      "(XINFO GROUPS; XGROUP DESTROY an abandoned one)", backlog, self.maxlen, need)
        return backlog

    def _needed_from(self) -> str | None:
        """The oldest entry id any group still needs (its oldest pending entry, else the one after
        its last delivered), or None when there is no group. Groups only move forward, so this
        read racing a consumer errs on the side of keeping."""
        groups: Any = self._r.xinfo_groups(self.stream)
        if not groups:
            return None
        pipe = self._r.pipeline(transaction=False)
        for g in groups:
            pipe.xpending(self.stream, g["name"])
        floors = []
        for g, pending in zip(groups, pipe.execute()):
            floors.append(_after(text(g["last-delivered-id"])))
            if pending.get("pending") and pending.get("min"):
                floors.append(_parse_id(text(pending["min"])))
        ms, seq = min(floors)
        return f"{ms}-{seq}"

    def published_id(self, session_id: str) -> str | None:
        v = self._r.get(keys.session_published(session_id))
        return None if v is None or blob(v).startswith(_PENDING) else text(v)

    def gone(self, session_ids: list[str]) -> set[str]:
        """Which of ``session_ids`` were published (within the marker's TTL) in an entry no longer
        in the stream: trimmed before a consumer group existed, which that group never reads."""
        pipe = self._r.pipeline(transaction=False)
        for sid in session_ids:
            pipe.get(keys.session_published(sid))
        entries = {sid: text(v) for sid, v in zip(session_ids, pipe.execute())
                   if v is not None and not blob(v).startswith(_PENDING)}
        for entry_id in entries.values():
            pipe.xrange(self.stream, entry_id, entry_id, count=1)
        return {sid for sid, found in zip(entries, pipe.execute()) if not found}

    # --- consumer ----------------------------------------------------------------------------

    def ensure_group(self, group: str) -> int | None:
        """Create ``group`` unless it exists, at id 0 (entries published before it are delivered
        too, but not those trimmed already): returns how many were (logged, kept: ``missed``) when
        this call created it, else 0; None when the server cannot tell (Redis < 7)."""
        pipe = self._r.pipeline(transaction=True)  # the count and the group's start: one instant
        pipe.xgroup_create(self.stream, group, id="0", mkstream=True)
        pipe.xinfo_stream(self.stream)
        created, info = pipe.execute(raise_on_error=False)
        if isinstance(created, Exception):
            if "BUSYGROUP" not in str(created):
                raise created
            return 0
        if isinstance(info, Exception):
            raise info
        missed, first = missed_before(info), text(info["first-entry"][0]) if info.get("first-entry") else "-"
        if missed == 0:
            self._r.delete(keys.results_missed(group))  # (an earlier group of that name's)
        else:
            self._r.hset(keys.results_missed(group), mapping={
                "entries": "?" if missed is None else missed, "first_kept": first, "at": repr(time.time()),
                "max_deleted": text(info.get("max-deleted-entry-id") or b"?")})
        if missed:
            log.warning("results stream: consumer group %s was created after %d entries had been trimmed from the "
                        "stream (it starts at %s): it will never read them; their sessions' results are in the "
                        "results directory (POLAR_RESULTS_DIR) and GET /rollout/session/<id>", group, missed, first)
        return missed

    def missed(self, group: str) -> int | None:
        """How many entries were gone from the stream when ``group`` was created (``ensure_group``):
        0 when none (or the group does not exist yet), None when the server could not tell."""
        v = self._r.hget(keys.results_missed(group), "entries")
        return 0 if v is None else None if v == b"?" else int(v)

    def read(self, group: str, consumer: str, *, pending: bool, count: int = 16,
             block_ms: int | None = 1000, after: str = "0") -> list[StreamEntry]:
        """``pending=True`` re-reads this consumer's unacked entries (those after ``after``: a
        page at a time); else new ones (blocking)."""
        resp: Any = self._r.xreadgroup(group, consumer, {self.stream: after if pending else ">"},
                                  count=count, block=None if pending else block_ms)
        return [e for _, got in (resp or []) for e in map(_entry, got) if e is not None]

    def claim_stale(self, group: str, consumer: str, min_idle_ms: int, count: int = 100) -> list[StreamEntry]:
        """Take over entries another consumer read but has not acked for ``min_idle_ms`` (it
        died). XPENDING IDLE + XCLAIM rather than XAUTOCLAIM: a live consumer must not re-claim
        (and re-count) the entries it still holds itself. An entry trimmed away while pending
        (XCLAIM drops those silently) comes back with an empty blob, for the caller to report."""
        ids: list[str] = []
        summary: Any = self._r.xpending(self.stream, group)
        others = [text(row["name"]) for row in summary.get("consumers") or []
                  if text(row["name"]) != consumer and int(row["pending"])]
        # A consumer whose iterator still beats is alive, however long its entries idle: its
        # claim_idle_ms (its touch period) may be longer than this one's.
        alive = {name for name, beats in zip(others, self._beating(group, others)) if beats}
        # Per other consumer: a range over the whole group would be filled by this consumer's own
        # held entries (a trainer batching hundreds of them) and never reach a dead one's.
        for name in others:
            if name in alive or len(ids) >= count:
                continue
            rows: Any = self._r.xpending_range(self.stream, group, min="-", max="+", count=count - len(ids),
                                               consumername=name, idle=min_idle_ms)
            ids += [text(r["message_id"]) for r in rows]
        if not ids:
            return []
        reply: Any = self._r.xclaim(self.stream, group, consumer, min_idle_ms, list[Any](ids))
        entries = [e for e in map(_entry, reply) if e is not None]
        got = {e.entry_id for e in entries}
        missing = [i for i in ids if i not in got]
        if missing:  # claimed by someone else first, or deleted: only the latter is reported
            pipe = self._r.pipeline(transaction=False)
            for i in missing:
                pipe.xrange(self.stream, i, i)
            entries += [StreamEntry(i, "", b"") for i, rng in zip(missing, pipe.execute()) if not rng]
        return entries

    def beat(self, group: str, consumer: str, ttl_ms: int) -> None:
        """Say that ``consumer``'s iterator is alive for ``ttl_ms`` (``claim_stale`` of other
        consumers leaves its entries alone meanwhile)."""
        # (at least three beats long: the iterator beats every claim_idle_ms / 3, and 50 ms at the least)
        self._r.set(keys.results_alive(group, consumer), b"1", px=max(150, int(ttl_ms)))

    def stop_beating(self, group: str, consumer: str) -> None:
        self._r.delete(keys.results_alive(group, consumer))

    def live_consumers(self, group: str) -> list[str]:
        """The consumers of ``group`` whose iterator beats (open, or killed within its claim_idle_ms)."""
        try:
            names = [text(c["name"]) for c in self._r.xinfo_consumers(self.stream, group)]
        except redis.ResponseError:  # no stream or no such group yet
            return []
        return [name for name, beats in zip(names, self._beating(group, names)) if beats]

    def _beating(self, group: str, consumers: list[str]) -> list[bool]:
        if not consumers:
            return []
        pipe = self._r.pipeline(transaction=False)
        for name in consumers:
            pipe.exists(keys.results_alive(group, name))
        return [bool(x) for x in pipe.execute()]

    def touch(self, group: str, consumer: str, entry_ids: list[str]) -> int:
        """Reset the idle time of the entries ``consumer`` still holds (alive: not to be claimed
        as a dead consumer's); an entry another consumer has meanwhile taken stays with it.
        Returns how many were touched."""
        # In slices: Redis's Lua cannot unpack ~8,000 values into one XCLAIM (a consumer restarted
        # holding that many re-reads them all), and short scripts keep Redis responsive.
        return sum(int(self._touch(keys=[self.stream], args=[group, consumer, *entry_ids[i:i + TOUCH_SLICE]]))
                   for i in range(0, len(entry_ids), TOUCH_SLICE))

    def reclaim(self, group: str, consumer: str, entry_ids: list[str]) -> list[StreamEntry]:
        """Deliver ``entry_ids`` again to ``consumer`` (a nack; counted when handed over again)."""
        if not entry_ids:
            return []
        reply: Any = self._r.xclaim(self.stream, group, consumer, 0, list[Any](entry_ids))
        return [e for e in map(_entry, reply) if e is not None]

    def ack(self, group: str, *entry_ids: str) -> int:
        if not entry_ids:
            return 0
        pipe = self._r.pipeline(transaction=False)
        pipe.xack(self.stream, group, *entry_ids)
        pipe.hdel(keys.results_handed(group), *entry_ids)
        acked = acked_where_group_exists(pipe.execute(raise_on_error=False), group)[0]
        return 0 if isinstance(acked, Exception) else int(acked)

    def dead_letter(self, group: str, consumer: str, entry: StreamEntry, reason: str) -> str:
        """Move ``entry`` to the dead-letter stream (with who gave up on it and why), then ack it
        off the main stream. A crash in between can only copy it twice, never lose it."""
        dead = text(self._r.xadd(keys.RESULTS_DEAD_LETTER, {
            "entry_id": entry.entry_id, "session_id": entry.session_id, "data": entry.blob, "group": group,
            "consumer": consumer, "deliveries": str(entry.deliveries), "reason": reason,
            "at": repr(time.time())}, maxlen=self.maxlen, approximate=True))
        self.ack(group, entry.entry_id)
        log.error("results stream: entry %s (session %s) dead-lettered by %s/%s after %d deliveries: %s",
                  entry.entry_id, entry.session_id or "?", group, consumer, entry.deliveries, reason)
        return dead

    def dead_letters(self, count: int = 100) -> list[dict[str, str]]:
        """The newest dead-lettered entries (without their blobs), newest first."""
        rows: Any = self._r.xrevrange(keys.RESULTS_DEAD_LETTER, count=count)
        return [{"dead_id": text(i), **{text(k): text(v) for k, v in f.items() if k != b"data"}} for i, f in rows]

    def stats(self) -> dict[str, Any]:
        """What the pipeline status shows of the stream: size, cap, held-back trims, dead
        letters, and every group's pending and unread entries."""
        pipe = self._r.pipeline(transaction=False)
        pipe.xlen(self.stream)
        pipe.xlen(keys.RESULTS_DEAD_LETTER)
        pipe.get(keys.RESULTS_TRIM_HELD)
        pipe.get(keys.RESULTS_BACKLOG)
        length, dead, held, backlog = pipe.execute()
        groups: Any = self._r.xinfo_groups(self.stream) if length else []
        return {"length": int(length), "maxlen": self.maxlen, "dead_letters": int(dead),
                "trims_held_back": int(held or 0), "backlog_over_maxlen": int(backlog or 0),
                "groups": {text(g["name"]): {"pending": int(g["pending"]), "consumers": int(g["consumers"]),
                                             "lag": None if g.get("lag") is None else int(g["lag"]),
                                             "last_delivered_id": text(g["last-delivered-id"]),
                                             "missed_entries": self.missed(text(g["name"]))} for g in groups}}

    def lag(self, group: str) -> int | None:
        for g in self._r.xinfo_groups(self.stream):
            if g["name"].decode() == group:
                lag = g.get("lag")
                return None if lag is None else int(lag)
        return None


_last_held_log = [0.0]


def _entry(reply: Any) -> StreamEntry | None:
    if reply is None:
        return None
    entry_id, fields = reply
    if not fields:  # trimmed away while pending: an empty entry the consumer dead-letters
        return StreamEntry(text(entry_id), "", b"")
    data = blob(fields.get(b"data") or b"")
    session_id = fields.get(b"session_id")
    if not session_id:
        try:
            session_id = decode_arrays(data).session_id
        except Exception:  # undecodable: the consumer dead-letters it
            session_id = b""
    return StreamEntry(text(entry_id), text(session_id), data, task_id=text(fields.get(b"task_id") or b""))


def missed_before(info: Any) -> int | None:
    """Entries removed from a stream (trimmed, deleted), from its XINFO STREAM: what a consumer
    group created now at id 0 never sees. None before Redis 7 (no ``entries-added``) when the
    stream holds anything: it cannot be told then."""
    if info.get("entries-added") is not None:
        return max(0, int(info["entries-added"]) - int(info["length"]))
    return 0 if text(info.get("last-generated-id") or b"0-0") == "0-0" else None


def _parse_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _after(entry_id: str) -> tuple[int, int]:
    ms, seq = _parse_id(entry_id)
    return ms, seq + 1


