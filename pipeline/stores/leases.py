"""Stage leases: which worker runs which stage of which session, kept alive by a heartbeat; and
the one-pass-at-a-time lock of the reaper.

Celery may deliver a stage task twice (visibility timeout, a retried lost worker, a crash
between publishing the next stage and acking). The lease makes a second copy step aside while
the first is alive. A worker that dies stops renewing; the reaper takes its expired lease
(``take_expired``: each to exactly one reaper, once seen expired for a grace -- a Redis outage
makes every lease look expired, and the live holders renew theirs in that time) and sends the
stage again, whose guard then recovers. Leases live in one sorted set scored by expiry (plus an owner hash), so finding the
lost ones costs O(lost), not a scan of every live session. Times are Redis server time.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from typing import Any

import redis

from pipeline import keys
from pipeline.codec import text
from pipeline.errors import LeaseLost
from pipeline.status import Stage
from pipeline.stores import lua
from pipeline.stores.sessions import done_field

_KEYS = [keys.LEASE_EXPIRY, keys.LEASE_OWNER]
IDLE_EXIT_SECONDS = 60.0  # a lease keeper thread with nothing to renew ends after this
RECONNECT_SECONDS = 6.0  # longer than the patient client's longest wait between retries (stores/connection.py)


class StageLease:
    """One (session, stage) lease. Taken by ``acquire`` (or by the stage's begin script,
    ``stores/stage_runs.py``, then ``adopt``), renewed by this process's ``LeaseKeeper`` while
    held; ``lost`` is set if it lapsed and was taken."""

    def __init__(self, r: redis.Redis, session_id: str, stage: Stage, ttl_seconds: float) -> None:
        self.stage = stage
        self.session_id = session_id
        self.member = keys.lease_member(stage.value, session_id)
        self.token = uuid.uuid4().hex
        self.ttl_ms = max(1, int(ttl_seconds * 1000))
        self.lost = threading.Event()
        self._r = r

    def acquire(self) -> bool:
        if not lua.bind(self._r, lua.LEASE_ACQUIRE)(keys=[*_KEYS, keys.LEASE_SENT],
                                                     args=[self.member, self.token, self.ttl_ms]):
            return False
        self.adopt()
        return True

    def adopt(self) -> None:
        """The lease is held (a script took it): keep it alive from now on."""
        LeaseKeeper.of(self._r).hold(self)

    def confirm(self) -> None:
        """Before an act that cannot be undone (tearing a runtime down): raise ``LeaseLost`` if
        another copy took this stage over while this one stalled (one round trip)."""
        self._confirm()

    def commit(self, field: str, value: str) -> str:
        """``confirm``, and in the same step keep ``value`` in the session's ``field`` unless a
        value is there already; returns the kept one (an earlier copy's wins). Raises
        ``LeaseLost`` when taken over (nothing written)."""
        kept = self._confirm(field, value)[1]
        return kept.decode() if isinstance(kept, bytes) else str(kept)

    def _confirm(self, *commit: str) -> list[Any]:
        reply = lua.bind(self._r, lua.LEASE_CONFIRM)(keys=[*_KEYS, keys.LEASE_SENT, keys.session(self.session_id)],
                                                     args=[self.member, self.token, self.ttl_ms,
                                                           done_field(self.stage), *commit])
        if not reply[0]:
            self.lost.set()
            self.stop_heartbeat()
            raise LeaseLost(f"{self.member}: the lease was taken over while this copy stalled")
        self.adopt()  # (taken back after a lapse: renewed again from now on)
        return list(reply)

    def stop_heartbeat(self) -> None:
        """Stop renewing without releasing (what a worker's death looks like; tests)."""
        LeaseKeeper.of(self._r).drop(self)

    def release(self) -> None:
        self.stop_heartbeat()
        try:
            lua.bind(self._r, lua.LEASE_RELEASE)(keys=_KEYS, args=[self.member, self.token])
        except redis.RedisError:
            pass  # Redis is away: the lease expires and the reaper finds nothing to resend

    def __enter__(self) -> "StageLease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class LeaseKeeper:
    """Renews every lease this process holds on one Redis client: one thread, one round trip
    every third of the shortest lease's TTL. (A heartbeat thread per stage cost more CPU than
    the rest of a short stage.) The thread stops when nothing is held and starts again with the
    next lease; forked pool children get their own."""

    _keepers: dict[tuple[int, int], "LeaseKeeper"] = {}
    _lock = threading.Lock()

    def __init__(self, r: redis.Redis) -> None:
        self._r = r
        self._renew = lua.bind(r, lua.LEASE_RENEW_MANY)
        self._held: dict[str, StageLease] = {}  # token -> lease
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._next_beat: float | None = None  # when the thread wakes to renew (None: idle)

    @classmethod
    def of(cls, r: redis.Redis) -> "LeaseKeeper":
        key = (os.getpid(), id(r))
        with cls._lock:
            keeper = cls._keepers.get(key)
            if keeper is None or keeper._r is not r:
                keeper = cls._keepers[key] = cls(r)
            return keeper

    def hold(self, lease: StageLease) -> None:
        with self._changed:
            self._held[lease.token] = lease
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="polar-leases", daemon=True)
                self._thread.start()
            elif self._next_beat is None or self._next_beat > time.monotonic() + lease.ttl_ms / 3000.0:
                # Idle, or this lease needs renewing before the planned beat: plan again. Else the
                # planned beat renews it in time and the thread sleeps on (waking a thread per
                # stage cost about as much CPU as the beat).
                self._changed.notify()

    def drop(self, lease: StageLease) -> None:
        with self._changed:
            self._held.pop(lease.token, None)

    def _loop(self) -> None:
        next_beat, idle_since = None, None
        while True:
            with self._changed:
                now = time.monotonic()
                if not self._held:
                    # Stages come and go by the millisecond: keep the thread for a while rather
                    # than start one per stage.
                    idle_since = idle_since or now
                    if now - idle_since > IDLE_EXIT_SECONDS:
                        self._thread = None  # the next hold() starts a new one
                        return
                    next_beat = self._next_beat = None
                    self._changed.wait(IDLE_EXIT_SECONDS)
                    continue
                idle_since = None
                period = min(lease.ttl_ms for lease in self._held.values()) / 3000.0
                # A lease held now was taken at most now: its first renewal is due a third of its
                # TTL from now at the latest.
                next_beat = min(next_beat, now + period) if next_beat is not None else now + period
                if now < next_beat:
                    self._next_beat = next_beat
                    self._changed.wait(next_beat - now)
                    continue
                next_beat = self._next_beat = None
                held = list(self._held.values())
            self._beat(held)

    def _beat(self, held: list[StageLease]) -> None:
        by_ttl: dict[int, list[StageLease]] = {}
        for lease in held:
            by_ttl.setdefault(lease.ttl_ms, []).append(lease)
        for ttl, leases in by_ttl.items():
            try:
                ok = self._renew(keys=_KEYS, args=[ttl, *(x for lease in leases for x in (lease.member, lease.token))])
            except redis.RedisError:
                continue  # transient; the next beat retries before the leases run out
            for lease, kept in zip(leases, ok):
                if not kept:
                    lease.lost.set()  # expired and taken: another worker may own the stage now
                    self.drop(lease)


def note_sent(r: Any, session_id: str, stage: Stage) -> None:
    """This stage's message is being sent (``r`` may be a pipeline: a submission registers its
    INIT messages in the same transaction that stores the task)."""
    r.zadd(keys.LEASE_SENT, {keys.lease_member(stage.value, session_id): time.time()})


def sent_before(r: redis.Redis, cutoff: float, limit: int = 1000) -> list[tuple[str, Stage, float]]:
    """(session, stage, when sent) of messages sent before ``cutoff`` whose stage never started."""
    rows: Any = r.zrangebyscore(keys.LEASE_SENT, "-inf", repr(cutoff), start=0, num=limit, withscores=True)
    out = []
    for member, score in rows:
        stage, _, sid = text(member).partition(":")
        out.append((sid, Stage(stage), float(score)))
    return out


def take_grace_seconds(ttl_seconds: float) -> float:
    """How long a lease stays expired before the reaper takes it: half its TTL, and longer than a
    live holder takes to reconnect after an outage (the ``patient`` client's retries wait up to
    5 s apart) and renew it -- time in Redis jumps past every expiry while it is away."""
    return max(ttl_seconds / 2, RECONNECT_SECONDS)


def take_expired(r: redis.Redis, grace_seconds: float = 0.0, limit: int = 1000) -> list[tuple[str, Stage]]:
    """(session, stage) of leases whose holder stopped renewing, each handed to one caller: those
    seen expired by an earlier call at least ``grace_seconds`` ago and never renewed since (0:
    every expired lease now)."""
    members = lua.bind(r, lua.LEASE_TAKE_EXPIRED)(keys=[*_KEYS, keys.LEASE_SEEN_EXPIRED],
                                                  args=[limit, int(grace_seconds * 1000)]) or []
    out = []
    for m in members:
        stage, _, sid = text(m).partition(":")
        out.append((sid, Stage(stage)))
    return out


def held(r: redis.Redis, session_id: str, stage: Stage) -> bool:
    """Whether a worker holds this stage's lease right now (an expired entry counts as free)."""
    return held_many(r, [(session_id, stage)])[0]


def held_many(r: redis.Redis, pairs: list[tuple[str, Stage]]) -> list[bool]:
    """``held`` for many (session, stage) pairs in one round trip."""
    pipe = r.pipeline(transaction=False)
    pipe.time()
    for sid, stage in pairs:
        pipe.zscore(keys.LEASE_EXPIRY, keys.lease_member(stage.value, sid))
    (seconds, _), *scores = pipe.execute()
    return [score is not None and score > seconds * 1000 for score in scores]


def try_prune_pass(r: redis.Redis, ttl_seconds: float) -> bool:
    """Whether this process may prune this host's old files now (one worker per host and interval)."""
    return bool(r.set(keys.prune_lock(socket.gethostname()), "1", nx=True, ex=max(1, int(ttl_seconds))))


def try_reaper_pass(r: redis.Redis, ttl_seconds: float) -> bool:
    """Whether this process may run a reaper pass now (one pass per interval across workers)."""
    return bool(r.set(keys.REAPER_LOCK, "1", nx=True, ex=max(1, int(ttl_seconds))))
