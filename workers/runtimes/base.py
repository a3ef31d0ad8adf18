"""The runtime seam: where an agent session executes (a local directory, a container, ...).

A runtime is created by INIT and used again by RUN and EVALUATE, usually in other worker
processes, so it is described by a JSON-able ``handle`` from which any process can re-attach:
a backend (``RuntimeBackend``, what the registry holds) ``create``s and ``attach``es runtimes.
Errors are ``pipeline.errors.RuntimeBackendError`` (``RuntimeStartError``, ``ExecError``).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Protocol, runtime_checkable

from pipeline.errors import ExecError
from pipeline.schemas import RuntimeSpec

SESSION_MOUNT = "/polar/session"  # where the session directory appears inside a runtime
EVAL_SUFFIX = ".eval"  # the evaluation runtime of session S (``refresh_runtime``) is named S.eval


def owner_session(runtime_name: str) -> str:
    """The session a runtime (directory or container) belongs to."""
    return runtime_name.removesuffix(EVAL_SUFFIX)


@dataclass(frozen=True)
class RuntimeHost:
    """What a backend needs of the worker's host (from the settings): where session directories
    live, the container engine's API, the proxy's Unix socket (for runtimes without a network),
    and the harness tools folder mounted read-only into containers."""

    root: Path
    docker_host: str | None = None
    docker_call_timeout: float = 30.0  # a control call's wait for the engine's answer
    proxy_socket: Path | None = None
    tools_dir: Path | None = None
    task_id: str = ""  # whose session it is (container labels)
    apptainer_bin: str | None = None
    # The service's own folders (POLAR_HOME: secrets, Redis's files; every session's; the results),
    # wherever links put them: a sandbox that sees the host read-only does not see these (the
    # folder of every session's is always among them).
    private: tuple[Path, ...] = ()

    @classmethod
    def of(cls, settings: Any, task_id: str = "") -> "RuntimeHost":
        return cls(root=settings.runtime_root, docker_host=settings.docker_host,
                   docker_call_timeout=settings.docker_call_timeout_seconds,
                   proxy_socket=settings.proxy_socket, tools_dir=settings.tools_path, task_id=task_id,
                   apptainer_bin=settings.apptainer_bin,
                   private=(settings.home, settings.runtime_root, settings.results_path))


TAIL_BYTES = 64 * 1024  # how much of a command's output an ExecResult carries (the log file has all)


CANCEL_SUFFIX = ".cancelled"
IMAGE_USER_SUFFIX = ".image-user"  # beside a docker session's folder handed to its image's user
MARKER_SUFFIXES = (CANCEL_SUFFIX, IMAGE_USER_SUFFIX)  # files beside session folders (the sweeper's)


def cancel_marker(root: Path) -> Path:
    """Where a session's cancel is marked for every process: beside its folder, not in it. What
    runs in the session writes its folder; a marker there would let it cancel its own grading
    (a sample it expects to fail ends CANCELLED, which a trainer drops, instead of reward 0)."""
    return root.with_name(root.name + CANCEL_SUFFIX)


def mark_cancelled(root: Path) -> None:
    marker = cancel_marker(root)
    create_in(marker.parent, marker.name).close()


def unmark_cancelled(root: Path) -> None:
    cancel_marker(root).unlink(missing_ok=True)


def create_in(folder: Path, name: str) -> BinaryIO:
    """``folder/name`` created (or emptied) for the worker to write and read back, following no
    symbolic link: a session's folders are written by what runs in the session too (a sandbox, a
    container), which could leave a link in the place of ``folder`` or ``name`` pointing anywhere
    on the worker's host. A link left as ``name`` is replaced; ``folder`` a link is an OSError."""
    dir_fd = _open_folder(folder)
    try:
        # O_NONBLOCK: a named pipe left in the file's place must not hang the worker's thread
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = _regular(os.open(name, flags, 0o644, dir_fd=dir_fd))
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.EINVAL, errno.ENXIO):  # a link, not a regular file
                raise
            os.unlink(name, dir_fd=dir_fd)
            fd = _regular(os.open(name, flags | os.O_EXCL, 0o644, dir_fd=dir_fd))
        os.set_blocking(fd, True)
    finally:
        os.close(dir_fd)
    return os.fdopen(fd, "w+b")


def read_in(path: Path, limit: int) -> bytes:
    """At most ``limit`` bytes of a file in a session folder the worker reads, refusing (OSError)
    a link in its place or in its folder's, and anything but a regular file (a named pipe would
    hang the read, a device never end)."""
    dir_fd = _open_folder(path.parent)
    try:
        fd = _regular(os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd))
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as f:
        return f.read(limit)


def open_logs(root: Path, name: str) -> tuple[BinaryIO, BinaryIO]:
    """A command's stdout and stderr log files in ``root/logs`` (``create_in``)."""
    try:
        return create_in(root / "logs", f"{name}.stdout"), create_in(root / "logs", f"{name}.stderr")
    except OSError as exc:
        raise ExecError(f"cannot create the command's logs in {root / 'logs'}: {exc}") from exc


def _open_folder(folder: Path) -> int:
    """A folder of a session's, opened without following a link in its place."""
    return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _regular(fd: int) -> int:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return fd


def remove_in(folder: Path, name: str) -> None:
    """``folder/name`` removed, if there, without following a link in ``folder``'s place."""
    try:
        dir_fd = _open_folder(folder)
    except OSError:
        return
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(dir_fd)


def tail_of(f: BinaryIO) -> str:
    """The last TAIL_BYTES of a log file the worker holds open, as text (read from the file it
    wrote, never again by its path, which what ran in the session may have replaced by a link)."""
    f.flush()
    f.seek(0, os.SEEK_END)
    f.seek(max(0, f.tell() - TAIL_BYTES))
    return f.read().decode("utf-8", "replace")


def tools_folder(host: RuntimeHost) -> str | None:
    """The harness tools folder to give a runtime: only one that exists (``polar tools install``)."""
    return str(host.tools_dir) if host.tools_dir and host.tools_dir.is_dir() else None


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

    def upload(self, src: str, dst: str) -> None:
        """Copy a host file or folder to a runtime path (``paths.py``: checked to stay inside)."""

    def download(self, src: str, dst: str) -> None:
        """Copy a runtime file or folder to a host path."""

    def write(self, dst: str, data: bytes) -> None:
        """Create (or replace) one file at a runtime path with ``data`` (a harness's config, the
        instruction): what ``upload`` of a temporary host file would do, without the file."""

    def cancel(self) -> None:
        """Kill whatever runs inside right now (callable from another process)."""

    def reachable_url(self, url: str) -> str:
        """How a service on the worker's host (the proxy) is reached from inside this runtime."""


class RuntimeBackend(Protocol):
    """What the registry holds: a backend makes runtimes for INIT and re-attaches them (from a
    handle, in any process) for the later stages."""

    backend: str

    def create(self, spec: RuntimeSpec, session_id: str, host: RuntimeHost) -> Runtime: ...

    def attach(self, handle: dict[str, Any]) -> Runtime: ...
