"""The session hash (and the session's in-flight call counter): written only through this store.

Status writes go through one Lua script that checks the enum's rules server-side, so a write
that would leave a terminal state (or skip a stage) is refused even when two processes race.
Every field has a name here (``F``, the timing fields of ``SessionTiming`` and the per-stage
markers); nothing else spells a field of the session hash.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, NamedTuple

import redis

from pipeline import keys
from pipeline.codec import text
from pipeline.credentials import key_digest, new_session_key, same_secret
from pipeline.errors import StateError, TransitionRefused
from pipeline.schemas import SessionSpec, SessionTiming, TokenIn
from pipeline.status import Outcome, SessionStatus, Stage
from pipeline.stores import lua

TIMING_FIELDS = tuple(SessionTiming.model_fields)
# Model calls are accepted while the session's runtime is up and the agent may run.
ACCEPTS_CALLS = (SessionStatus.INITIALIZING, SessionStatus.READY, SessionStatus.RUNNING)
DONE_NOWHERE = "-"  # a stage finished without sending the session on


# A call waiting out a pause has its proxy refresh its session's mark more often than this; a mark
# not refreshed for longer was left by a proxy that died (``lua.SESSION_PARK``).
PARK_STALE_SECONDS = 3.0


class F(str, Enum):
    """Fields of the session hash besides the timing fields and the stage markers."""

    STATUS = "status"
    TASK_ID = "task_id"
    SAMPLE_INDEX = "sample_index"
    SPEC = "spec"
    REGISTERED_AT = "registered_at"
    OUTCOME = "outcome"  # how the agent part ended (first write wins)
    ERROR = "error"
    CANCEL = "cancel"  # "1" once a cancel was requested
    DEADLINE = "deadline"  # epoch seconds; the budget counts from INIT start
    CALLS_UNTIL = "calls_until"  # epoch seconds: the end of the agent's own budget (agent_timeout)
    RUNTIME = "runtime"  # JSON handle any worker can re-attach the runtime from
    AGENT_EXIT_CODE = "agent_exit_code"
    SEQ = "seq"  # model calls admitted so far (written by the begin-call script)
    KEY = "key"  # the session's secret proxy key (pipeline/credentials.py): for its runtime only
    KEY_DIGEST = "key_digest"  # SHA-256 of the key: what the proxy compares
    EVAL_RUNTIME = "eval_runtime"  # handle of the fresh evaluation runtime (evaluator.refresh_runtime)
    EVAL_RUNTIME_ERROR = "eval_runtime_error"  # why it could not be made ready
    TOKEN_IN = "token_in"  # agent.token_in when not off: read by the proxy as it admits a call
    MAX_CALLS = "max_calls"  # agent.max_model_calls when set: read by the proxy as it admits a call
    CALLS_SPENT = "calls_spent"  # "1" once a call past max_calls was refused (RUN stops the agent)
    GRADE = "grade"  # EVALUATE's grade (JSON), committed before the runtimes are torn down (first wins)
    # Calls of the session waiting out a weight-sync pause now, since when, and the seconds spent
    # so in all (lua.SESSION_PARK): time RUN does not charge to the agent.
    PARKED = "parked"
    PARKED_SINCE = "parked_since"
    PARKED_SECONDS = "parked_seconds"
    PARKED_SEEN = "parked_seen"  # when a proxy last said a call of the session still waits


class RunPoll(NamedTuple):
    cancel: bool
    parked: float  # seconds the session's calls waited out weight-sync pauses
    calls_spent: bool  # a call past agent.max_model_calls was refused


def started_field(stage: Stage) -> str:
    return f"started:{stage.value}"


def done_field(stage: Stage) -> str:
    return f"done:{stage.value}"


_WRITABLE = {f.value for f in F} | set(TIMING_FIELDS)


@dataclass
class SessionState:
    session_id: str
    status: SessionStatus
    spec: SessionSpec
    outcome: Outcome | None
    error: str | None
    cancel_requested: bool
    deadline: float | None
    runtime: dict[str, Any] | None
    timing: SessionTiming
    key: str | None = field(default=None, repr=False)  # never logged
    eval_runtime: dict[str, Any] | None = None
    eval_runtime_error: str | None = None
    grade: dict[str, Any] | None = None  # EVALUATE's committed grade: a re-run grades nothing again
    calls_admitted: int = 0  # model calls the proxy admitted (each has a seq; its record has it)
    started: set[Stage] = field(default_factory=set)
    # stage -> where it sent the session (None: nowhere)
    done: dict[Stage, Stage | None] = field(default_factory=dict)
    # The replies of the reads the stage queued with its begin (workers/stages/common.py's
    # BEGIN_READS), in their order; None when it queued none.
    read: list[Any] | None = field(default=None, repr=False, compare=False)

    def remaining(self, now: float | None = None) -> float | None:
        if self.deadline is None:
            return None
        return self.deadline - (time.time() if now is None else now)


class SessionStore:
    def __init__(self, r: redis.Redis, ttl_seconds: int = 7 * 24 * 3600) -> None:
        self._r = r
        self._ttl = ttl_seconds
        self._transition = lua.bind(r, lua.SESSION_TRANSITION)
        self._park = lua.bind(r, lua.SESSION_PARK)

    # --- creation and reads ------------------------------------------------------------------

    def register(self, spec: SessionSpec, pipe: Any = None) -> str:
        """Register a session with a new secret key; returns the key."""
        target = pipe if pipe is not None else self._r
        key = keys.session(spec.session_id)
        secret = new_session_key(spec.session_id)
        target.hset(key, mapping={
            F.STATUS.value: SessionStatus.REGISTERED.value,
            F.TASK_ID.value: spec.task_id,
            F.SAMPLE_INDEX.value: spec.sample_index,
            F.SPEC.value: spec.model_dump_json(),
            F.REGISTERED_AT.value: repr(time.time()),
            F.KEY.value: secret,
            F.KEY_DIGEST.value: key_digest(secret),
            **({F.TOKEN_IN.value: spec.agent.token_in.value} if spec.agent.token_in != TokenIn.OFF else {}),
            **({F.MAX_CALLS.value: spec.agent.max_model_calls} if spec.agent.max_model_calls else {}),
        })
        # Kept while the session may run (its budget) and then for as long as results are kept.
        target.expire(key, int(spec.timeout_seconds) + self._ttl + 3600)
        return secret

    def get(self, session_id: str) -> SessionState | None:
        raw: dict[Any, Any] = self._r.hgetall(keys.session(session_id))
        return self.parse(session_id, raw)

    @staticmethod
    def parse(session_id: str, raw: dict[Any, Any] | list[Any]) -> SessionState | None:
        """A session from its hash as HGETALL gives it (a map, or a script's flat list)."""
        if not raw:
            return None
        pairs = raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2])
        f = {text(k): text(v) for k, v in pairs}
        return SessionState(
            session_id=session_id,
            status=SessionStatus(f[F.STATUS]),
            spec=SessionSpec.model_validate_json(f[F.SPEC]),
            outcome=Outcome(f[F.OUTCOME]) if f.get(F.OUTCOME) else None,
            error=f.get(F.ERROR) or None,
            cancel_requested=f.get(F.CANCEL) == "1",
            deadline=float(f[F.DEADLINE]) if f.get(F.DEADLINE) else None,
            runtime=json.loads(f[F.RUNTIME]) if f.get(F.RUNTIME) else None,
            timing=SessionTiming(**{k: float(f[k]) for k in TIMING_FIELDS if f.get(k)}),
            key=f.get(F.KEY),
            eval_runtime=json.loads(f[F.EVAL_RUNTIME]) if f.get(F.EVAL_RUNTIME) else None,
            eval_runtime_error=f.get(F.EVAL_RUNTIME_ERROR) or None,
            grade=json.loads(f[F.GRADE]) if f.get(F.GRADE) else None,
            calls_admitted=int(f.get(F.SEQ) or 0),
            started={s for s in Stage if f.get(started_field(s))},
            done={s: (None if v == DONE_NOWHERE else Stage(v))
                  for s in Stage if (v := f.get(done_field(s)))},
        )

    def status(self, session_id: str) -> SessionStatus | None:
        raw = self._r.hget(keys.session(session_id), F.STATUS.value)
        return SessionStatus(text(raw)) if raw else None

    def task_id(self, session_id: str) -> str | None:
        raw = self._r.hget(keys.session(session_id), F.TASK_ID.value)
        return text(raw) if raw else None

    def queue_summary(self, pipe: Any, session_id: str) -> None:
        """Add to ``pipe`` the read that ``parse_summary`` turns into (status, index, timing)."""
        pipe.hmget(keys.session(session_id), F.STATUS.value, F.SAMPLE_INDEX.value, *TIMING_FIELDS)

    @staticmethod
    def parse_summary(row: list[bytes | None]) -> tuple[SessionStatus | None, int, SessionTiming]:
        status = SessionStatus(text(row[0])) if row[0] else None
        timing = SessionTiming(**{k: float(v) for k, v in zip(TIMING_FIELDS, row[2:]) if v})
        return status, int(row[1] or 0), timing

    # --- writes ------------------------------------------------------------------------------

    def transition(self, session_id: str, target: SessionStatus, *,
                   expected: Iterable[SessionStatus] | None = None, **fields: Any) -> SessionStatus:
        """Move to ``target`` if the rules (and ``expected``) allow it, writing ``fields`` (named
        fields of the hash) with it; returns the old status."""
        ok, previous = self._transition(keys=[keys.session(session_id)],
                                        args=self.transition_args(target, expected, fields))
        return self.transition_result(session_id, target, ok, previous)

    @staticmethod
    def transition_args(target: SessionStatus, expected: Iterable[SessionStatus] | None,
                        fields: dict[str, Any]) -> list[Any]:
        """ARGV of the state machine's write (``lua.sessions._TRANSITION``): target, allowed, token, fields."""
        allowed = target.predecessors()
        if expected is not None:
            allowed &= frozenset(expected)
        return [target.value, ",".join(s.value for s in allowed), uuid.uuid4().hex, *SessionStore.field_args(fields)]

    @staticmethod
    def field_args(fields: dict[str, Any]) -> list[str]:
        """Named fields of the hash as field/value pairs (an unknown name is refused)."""
        return [x for kv in _checked(fields).items() for x in kv]

    @staticmethod
    def transition_result(session_id: str, target: SessionStatus, ok: int, previous: Any) -> SessionStatus:
        previous = previous.decode() if isinstance(previous, bytes) else previous
        if not ok:
            raise TransitionRefused(session_id, previous or None, target.value)
        return SessionStatus(previous)

    def set(self, session_id: str, **fields: Any) -> None:
        self._r.hset(keys.session(session_id), mapping=_checked(fields))  # type: ignore[arg-type]

    def stamp(self, session_id: str, timing_field: str) -> float:
        now = time.time()
        self.set(session_id, **{timing_field: now})
        return now

    def set_outcome(self, session_id: str, outcome: Outcome, error: str | None = None) -> Outcome:
        """Record how the agent part ended; the first outcome wins (cancel beats a later timeout)."""
        key = keys.session(session_id)
        if self._r.hsetnx(key, F.OUTCOME.value, outcome.value):
            if error:
                self._r.hset(key, F.ERROR.value, error[:4000])
            return outcome
        return Outcome(text(self._r.hget(key, F.OUTCOME.value) or b""))

    def request_cancel(self, session_id: str) -> bool:
        """Flag the session cancelled; False when it already was."""
        return bool(self._r.hsetnx(keys.session(session_id), F.CANCEL.value, "1"))

    def cancel_requested(self, session_id: str) -> bool:
        return self._r.hget(keys.session(session_id), F.CANCEL.value) == b"1"

    def park(self, session_id: str, parked: bool | None) -> None:
        """One of the session's calls starts (``parked``), still is (None: refreshed by its proxy
        at least every ``PARK_STALE_SECONDS``) or stops waiting out a weight-sync pause."""
        self._park(keys=[keys.session(session_id)], args=[0 if parked is None else 1 if parked else -1,
                                                          PARK_STALE_SECONDS])

    def run_poll(self, session_id: str) -> RunPoll:
        """What RUN polls while the agent runs, in one read: whether a cancel was requested, the
        seconds the session's calls have spent waiting out pauses (the wait going on included, to
        its last refresh and ``PARK_STALE_SECONDS`` at most: a mark a killed proxy left stops),
        and whether its model-call budget is spent."""
        pipe = self._r.pipeline(transaction=False)
        self.queue_run_poll(pipe, session_id)
        pipe.time()  # the marks are Redis TIME: the worker's clock would add its skew to every wait
        row, now = pipe.execute()
        return self.parse_run_poll(row, now)

    @staticmethod
    def queue_run_poll(pipe: Any, session_id: str) -> None:
        """Add to ``pipe`` the read ``parse_run_poll`` decodes (with a Redis TIME queued too)."""
        pipe.hmget(keys.session(session_id), [F.CANCEL.value, F.PARKED_SINCE.value, F.PARKED_SECONDS.value,
                                              F.PARKED_SEEN.value, F.CALLS_SPENT.value])

    @staticmethod
    def parse_run_poll(row: list[Any], now: tuple[int, int]) -> RunPoll:
        """``queue_run_poll``'s reply, against Redis's TIME ``now`` (seconds, microseconds)."""
        cancel, since, total, seen, spent = row
        sec, usec = now
        parked = float(total or 0)
        if since:
            end = sec + usec / 1e6
            if seen:
                end = min(end, float(seen) + PARK_STALE_SECONDS)
            parked += max(0.0, end - float(since))
        return RunPoll(cancel == b"1", parked, spent == b"1")

    # --- stage markers (the redelivery guard, workers/stages/common.py) ---------------------

    def mark_started(self, session_id: str, stage: Stage) -> None:
        self._r.hset(keys.session(session_id), started_field(stage), "1")

    def mark_done(self, session_id: str, stage: Stage, sent_to: Stage | None) -> None:
        """The stage finished and sent the session to ``sent_to`` (a redelivered copy repeats it)."""
        self._r.hset(keys.session(session_id), done_field(stage),
                     sent_to.value if sent_to is not None else DONE_NOWHERE)

    # --- model calls in flight (the proxy's begin/end round trips) ---------------------------

    def begin_call_command(self) -> tuple[Any, ...]:
        """Head of the EVALSHA the proxy sends to admit a call (``begin_call_args`` completes it)."""
        return ("EVALSHA", lua.SESSION_BEGIN_CALL.sha, 2)

    @staticmethod
    def begin_call_args(session_id: str, key: str, call_id: str, expiry: float) -> tuple[str, ...]:
        return (keys.session(session_id), keys.session_calls(session_id), key_digest(key), repr(expiry), call_id,
                *(s.value for s in ACCEPTS_CALLS))

    def load_begin_call_script(self) -> None:
        """After NOSCRIPT (Redis restarted): load the script the proxy calls by sha."""
        self._r.script_load(lua.SESSION_BEGIN_CALL.source)

    @staticmethod
    def end_call_commands(session_id: str, call_id: str) -> list[tuple[Any, ...]]:
        return [("ZREM", keys.session_calls(session_id), call_id)]

    @staticmethod
    def renew_call_commands(session_id: str, call_id: str, expiry: float) -> list[tuple[Any, ...]]:
        """Extend a call's lease (only while it is still there: XX)."""
        return [("ZADD", keys.session_calls(session_id), "XX", repr(expiry), call_id)]

    def queue_inflight_calls(self, pipe: Any, session_id: str) -> None:
        """Add to ``pipe`` the count ``inflight_calls`` returns."""
        pipe.zcount(keys.session_calls(session_id), f"({time.time()!r}", "+inf")

    def inflight_calls(self, session_id: str) -> int:
        """Model calls of the session in flight on a live proxy (a dead proxy's leases lapse)."""
        return int(self._r.zcount(keys.session_calls(session_id), f"({time.time()!r}", "+inf"))

    def key_status(self, session_id: str, key: str) -> SessionStatus | None:
        """The session's status when ``key`` is its key, else None."""
        stored, status = self._r.hmget(keys.session(session_id), [F.KEY_DIGEST.value, F.STATUS.value])
        if stored is None or status is None or not same_secret(text(stored), key_digest(key)):
            return None
        return SessionStatus(text(status))


def _checked(fields: dict[str, Any]) -> dict[str, str]:
    unknown = set(fields) - _WRITABLE
    if unknown:
        raise StateError(f"not fields of the session hash: {sorted(unknown)}")
    return {k: _encode(v) for k, v in fields.items()}


def _encode(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    if isinstance(v, Enum):
        return str(v.value)
    return str(v)
