"""Lifecycle states. The enums own their rules; the session store enforces them on every write."""

from __future__ import annotations

from enum import Enum


class SessionStatus(str, Enum):
    REGISTERED = "REGISTERED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    RUNNING = "RUNNING"
    POSTRUN = "POSTRUN"
    EVALUATING = "EVALUATING"
    COMPLETED = "COMPLETED"
    ERROR = "ERROR"
    TIMEOUT = "TIMEOUT"
    CANCELLED = "CANCELLED"

    def is_terminal(self) -> bool:
        return self in TERMINAL

    def can_become(self, target: "SessionStatus") -> bool:
        """Whether a write of ``target`` over ``self`` is allowed. Terminal states are final."""
        return target in _NEXT[self]

    def predecessors(self) -> frozenset["SessionStatus"]:
        return frozenset(s for s in SessionStatus if s.can_become(self))


TERMINAL = frozenset(
    {SessionStatus.COMPLETED, SessionStatus.ERROR, SessionStatus.TIMEOUT, SessionStatus.CANCELLED}
)

S = SessionStatus
# Every non-terminal state may also jump to POSTRUN: a session that fails, times out or is
# cancelled early still goes through postrun -> evaluate -> callback, so that its runtime is
# torn down and exactly one result is published.
_NEXT: dict[SessionStatus, frozenset[SessionStatus]] = {
    S.REGISTERED: frozenset({S.INITIALIZING, S.POSTRUN}),
    S.INITIALIZING: frozenset({S.READY, S.POSTRUN}),
    S.READY: frozenset({S.RUNNING, S.POSTRUN}),
    S.RUNNING: frozenset({S.POSTRUN}),
    S.POSTRUN: frozenset({S.EVALUATING}),
    S.EVALUATING: TERMINAL,
    **{t: frozenset() for t in TERMINAL},
}
del S


class Outcome(str, Enum):
    """How the agent part of a session ended; decides the terminal status."""

    COMPLETED = "completed"
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"

    def terminal_status(self) -> SessionStatus:
        return SessionStatus[self.name]


class TaskState(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    CANCELLED = "cancelled"

    def is_terminal(self) -> bool:
        return self in (TaskState.COMPLETED, TaskState.CANCELLED)


class Stage(str, Enum):
    """One Celery queue (and worker fleet) per stage; tasks are addressed by name only."""

    INIT = "init"
    RUN = "run"
    POSTRUN = "postrun"
    EVALUATE = "evaluate"
    CALLBACK = "callback"

    @property
    def task_name(self) -> str:
        return f"polar.stage.{self.value}"

    @property
    def queue(self) -> str:
        return self.value

    def next(self) -> "Stage | None":
        order = list(Stage)
        i = order.index(self)
        return order[i + 1] if i + 1 < len(order) else None
