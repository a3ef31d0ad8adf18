"""The project's exception tree. Every error the project raises on purpose is a ``PolarError``;
each plug-in seam has exactly one error type (its registry raises it for unknown names and bad
configs too)::

    PolarError
     ├── ConfigError              a setting (POLAR_* variable) is unknown or invalid
     ├── StateError               a Redis store refused a write or lacks a record
     │    ├── TransitionRefused   a session status write the state machine forbids
     │    ├── LeaseLost           a stage's lease was taken over (it stalled past it): it writes nothing
     │    ├── TaskExists          submit of a task id that is taken
     │    └── TaskNotFound
     ├── BlobFormatError          a result or trajectory blob this code cannot read (pipeline/blobs)
     ├── BuildError               seam: trajectory builders      (pipeline/builders)
     ├── EngineError              seam: upstream engine dialects (proxy/upstream)
     │    └── CaptureError        the engine answered without the ids capture needs
     ├── RuntimeBackendError      seam: runtimes                 (workers/runtimes)
     │    ├── RuntimeStartError   the backend could not create the environment
     │    ├── ExecError           a command could not be started (not: it exited non-zero)
     │    └── PathRefused         a path would leave the session's filesystem
     ├── HarnessError             seam: harness adapters         (workers/harnesses)
     ├── EvaluationError          seam: evaluators               (workers/evaluators)
     ├── VerifyError              the verifier could not score   (proxy/verify.py)
     └── ProxyError               seam: providers; its own tree with HTTP statuses (proxy/errors.py)
"""

from __future__ import annotations


class PolarError(Exception):
    """Base of every error the project raises on purpose."""


class ConfigError(PolarError):
    pass


class StateError(PolarError):
    pass


class TransitionRefused(StateError):
    def __init__(self, session_id: str, current: str | None, target: str) -> None:
        self.session_id, self.current, self.target = session_id, current, target
        super().__init__(f"session {session_id}: {current or 'missing'} -> {target} refused")


class LeaseLost(StateError):
    """A stage copy outlived its lease (a stalled worker) and another copy or the reaper took it
    over: its end is refused whole -- nothing it computed is written -- and it must not act
    (tear down, kill) on the session any more."""


class TaskExists(StateError):
    pass


class TaskNotFound(StateError):
    pass


class BlobFormatError(PolarError, ValueError):
    """A blob of an unknown ``blob_version``, or malformed (docs/result-blobs.md). A ValueError
    too, so pydantic reports it as a validation error when a schema meets such a blob."""


class BuildError(PolarError):
    """The completions cannot be turned into a trajectory (reported as a session error)."""


class EngineError(PolarError):
    pass


class CaptureError(EngineError):
    """The upstream answered, but not with what token-faithful capture needs."""


class RuntimeBackendError(PolarError):
    pass


class RuntimeStartError(RuntimeBackendError):
    pass


class ExecError(RuntimeBackendError):
    pass


class PathRefused(RuntimeBackendError):
    pass


class EngineNotAnswering(RuntimeBackendError):
    """The container engine took longer than a control call may wait (a hung or wedged daemon)."""


class HarnessError(PolarError):
    pass


class EvaluationError(PolarError):
    pass


class VerifyError(PolarError):
    pass


def unreadable_body(exc: BaseException) -> tuple[int, str] | None:
    """The status and reason to answer when ``exc`` (werkzeug's ``ClientDisconnected``) came from
    the HTTP worker refusing to read on (infra/gevent_worker.py): a body slower than its pace or
    idle past the timeout (408), or framed beyond bounds (400); else None. werkzeug answers them
    all as a 400 saying "the browser (or proxy) sent a request that this server could not
    understand", which tells a client nothing."""
    cause = exc.__context__
    if isinstance(cause, TimeoutError):
        return 408, str(cause) or "the request's body did not arrive in time"
    if isinstance(cause, (OSError, ValueError)) and str(cause):
        return 400, f"the request's body could not be read: {cause}"
    return None
