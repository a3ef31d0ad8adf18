"""The runtime seam: where an agent session executes (a local directory, a container, ...).

A runtime is created by INIT and used again by RUN and EVALUATE, usually in other worker
processes, so it is described by a JSON-able ``handle`` from which any process can re-attach.
Exceptions form a small tree::

    RuntimeError_
     ├── RuntimeStartError     the backend could not create the environment
     └── ExecError             a command could not be started (not: it exited non-zero)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

SESSION_MOUNT = "/polar/session"  # where the session directory appears inside a runtime


class RuntimeError_(Exception):
    pass


class RuntimeStartError(RuntimeError_):
    pass


class ExecError(RuntimeError_):
    pass


@dataclass
class ExecResult:
    exit_code: int | None  # None when killed (timeout / cancel)
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    cancelled: bool = False
    duration_seconds: float = 0.0
    log_paths: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.cancelled


@runtime_checkable
class Runtime(Protocol):
    handle: dict[str, Any]

    def start(self) -> None: ...

    def stop(self) -> None:
        """Tear everything down; safe to call twice and from any process."""

    def exec(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        should_cancel: Callable[[], bool] | None = None,
        log_name: str | None = None,
    ) -> ExecResult:
        """Run ``command`` with bash; on timeout or cancel kill it and everything it started."""

    def upload(self, src: str, dst: str) -> None: ...

    def download(self, src: str, dst: str) -> None: ...

    def cancel(self) -> None:
        """Kill whatever runs inside right now (callable from another process)."""
