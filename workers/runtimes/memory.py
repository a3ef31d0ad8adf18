"""``memory``: an in-process runtime, for tests of stages, harnesses and evaluators that need a
runtime but not a process or a filesystem.

Files live in a dict (``files``, runtime path -> bytes). A command runs the Python function
registered under its first word in ``MemoryRuntime.commands`` (``true``, ``false`` and ``exit N``
are built in; anything else exits 127 like a missing program). Runtimes are kept in a
process-wide table, so ``attach`` from a handle finds the same instance, as another stage in the
same process would. It is a plug-in, named by import path in a task (``runtime.backend:
"workers.runtimes.memory:MemoryRuntime"``); it is not offered to users.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path, PurePosixPath
from typing import Any, Callable, ClassVar

from pipeline.errors import ExecError, RuntimeStartError
from pipeline.schemas import RuntimeSpec
from workers.runtimes.base import SESSION_MOUNT, ExecResult, RuntimeHost

Handler = Callable[["MemoryRuntime", list[str], dict[str, str]], ExecResult]
BACKEND = "workers.runtimes.memory:MemoryRuntime"


class MemoryRuntime:
    backend = BACKEND
    commands: ClassVar[dict[str, Handler]] = {}
    live: ClassVar[dict[str, "MemoryRuntime"]] = {}

    def __init__(self, session_id: str, workdir: str, env: dict[str, str]) -> None:
        self.session_id = session_id
        self.workdir = workdir
        self.env = env
        self.files: dict[str, bytes] = {}
        self.executed: list[str] = []
        self.started = self.stopped = self.cancelled = False
        self.handle: dict[str, Any] = {"backend": self.backend, "session_id": session_id}

    @classmethod
    def create(cls, spec: RuntimeSpec, session_id: str, host: RuntimeHost) -> "MemoryRuntime":
        runtime = cls(session_id, spec.workdir or f"{SESSION_MOUNT}/workspace", dict(spec.env))
        cls.live[session_id] = runtime
        return runtime

    @classmethod
    def attach(cls, handle: dict[str, Any]) -> "MemoryRuntime":
        try:
            return cls.live[handle["session_id"]]
        except KeyError:
            raise RuntimeStartError(f"no memory runtime for session {handle.get('session_id')!r} "
                                    "in this process") from None

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.stopped = True
        self.files.clear()

    def cancel(self) -> None:
        self.cancelled = True

    def exec(self, command: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
             timeout: float | None = None, should_cancel: Callable[[], bool] | None = None,
             log_name: str | None = None) -> ExecResult:
        if self.stopped:
            raise ExecError("the memory runtime was stopped")
        if self.cancelled or (should_cancel is not None and should_cancel()):
            return ExecResult(None, cancelled=True)
        self.executed.append(command)
        argv = shlex.split(command)
        started = time.monotonic()
        handler = self.commands.get(argv[0]) if argv else None
        if handler is not None:
            result = handler(self, argv, {**self.env, **(env or {})})
        elif argv[:1] in (["true"], ["false"], ["exit"]):
            code = {"true": 0, "false": 1}.get(argv[0]) if argv[0] != "exit" else int(argv[1] if len(argv) > 1 else 0)
            result = ExecResult(code)
        else:
            result = ExecResult(127, stderr=f"{argv[0] if argv else ''}: command not found")
        result.duration_seconds = time.monotonic() - started
        return result

    def reachable_url(self, url: str) -> str:
        return url

    def path(self, runtime_path: str) -> str:
        """A runtime path made absolute against the workdir; ``..`` may not leave the root."""
        p = PurePosixPath(runtime_path if runtime_path.startswith("/") else f"{self.workdir}/{runtime_path}")
        parts: list[str] = []
        for part in p.parts[1:]:
            if part == "..":
                if not parts:
                    raise ExecError(f"path {runtime_path!r} leaves the runtime")
                parts.pop()
            elif part != ".":
                parts.append(part)
        return "/" + "/".join(parts)

    def upload(self, src: str, dst: str) -> None:
        source = Path(src)
        if not source.exists():
            raise FileNotFoundError(src)
        target = self.path(dst)
        if source.is_dir():
            for f in sorted(source.rglob("*")):
                if f.is_file():
                    self.files[f"{target}/{f.relative_to(source).as_posix()}"] = f.read_bytes()
        else:
            self.files[target] = source.read_bytes()

    def write(self, dst: str, data: bytes) -> None:
        self.files[self.path(dst)] = bytes(data)

    def download(self, src: str, dst: str) -> None:
        source = self.path(src)
        if source in self.files:
            Path(dst).parent.mkdir(parents=True, exist_ok=True)
            Path(dst).write_bytes(self.files[source])
            return
        found = {k: v for k, v in self.files.items() if k.startswith(source + "/")}
        if not found:
            raise FileNotFoundError(src)
        for k, v in found.items():
            out = Path(dst) / k[len(source) + 1:]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(v)
