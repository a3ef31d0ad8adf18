"""The runtime seam: where an agent session executes (a local directory, a container, ...).

A runtime is created by INIT and used again by RUN and EVALUATE, usually in other worker
processes, so it is described by a JSON-able ``handle`` from which any process can re-attach:
a backend (``RuntimeBackend``, what the registry holds) ``create``s and ``attach``es runtimes.
Errors are ``pipeline.errors.RuntimeBackendError`` (``RuntimeStartError``, ``ExecError``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

from pipeline.schemas import RuntimeSpec

SESSION_MOUNT = "/polar/session"  # where the session directory appears inside a runtime


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


class RuntimeBackend(Protocol):
    """What the registry holds: a backend makes runtimes for INIT and re-attaches them (from a
    handle, in any process) for the later stages."""

    backend: str

    def create(self, spec: RuntimeSpec, session_id: str, runtime_root: Path) -> Runtime: ...

    def attach(self, handle: dict[str, Any]) -> Runtime: ...
