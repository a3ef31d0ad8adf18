"""``local``: a per-session directory on this machine, commands as process groups.

For development, tests and trusted workloads; it isolates HOME, TMPDIR and the environment,
not the filesystem. Each command runs in its own session (process group) whose id is written
under ``.pids/`` so that ``cancel``/``stop`` from any process can kill the whole group.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from pipeline.errors import ExecError, RuntimeStartError
from workers.runtimes.base import (
    ExecResult,
    RuntimeHost,
    cancel_marker,
    create_in,
    mark_cancelled,
    open_logs,
    remove_in,
    tail_of,
    tools_folder,
    unmark_cancelled,
)
from workers.runtimes.paths import host_path
from workers.runtimes.upload import upload_into

POLL_SECONDS = 0.1
SUBDIRS = ("workspace", "home", "tmp", "logs", "artifacts", ".pids")  # of every session directory
KILL_GRACE_SECONDS = 2.0


class LocalRuntime:
    backend = "local"

    def __init__(self, root: Path, workdir: Path, env: dict[str, str], tools_dir: str | None = None,
                 pid_floor: int | None = None) -> None:
        self.root = root
        self.workdir = workdir
        self.env = env
        self.tools_dir = tools_dir
        self.handle: dict[str, Any] = {
            "backend": self.backend, "root": str(root), "workdir": str(workdir), "env": env, "tools_dir": tools_dir,
            # Every process of the session gets a pid above this one (the newest when the runtime
            # was made): the sweep at teardown looks at those only (``kill_session_processes``).
            "pid_floor": pid_floor if pid_floor is not None else newest_pid(),
        }

    @classmethod
    def create(cls, spec: Any, session_id: str, host: RuntimeHost) -> "LocalRuntime":
        root = (host.root / session_id).resolve()
        workdir = host_path(root, root / "workspace", spec.workdir) if spec.workdir else root / "workspace"
        return cls(root, workdir, dict(spec.env), tools_folder(host))

    @classmethod
    def attach(cls, handle: dict[str, Any]) -> "LocalRuntime":
        return cls(Path(handle["root"]), Path(handle["workdir"]), dict(handle.get("env") or {}),
                   handle.get("tools_dir"), int(handle.get("pid_floor") or 0))

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        # One mkdir per folder and no more: a failed or repeated one costs as much as a made one
        # (~100-300 us of kernel CPU each on some virtual disks), and every session makes these.
        try:
            if not self.root.parent.is_dir():
                self.root.parent.mkdir(parents=True, exist_ok=True)
            _mkdir(self.root)
            for sub in SUBDIRS:
                _mkdir(self.root / sub)
            if self.workdir.parent != self.root or self.workdir.name not in SUBDIRS:
                self.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RuntimeStartError(f"cannot create {self.root}: {exc}") from exc

    def stop(self) -> None:
        self.cancel()
        shutil.rmtree(self.root, ignore_errors=True)
        unmark_cancelled(self.root)

    def cancel(self) -> None:
        pids = self.root / ".pids"
        if pids.is_dir() and not pids.is_symlink():
            mark_cancelled(self.root)
        self.end_processes()

    def end_processes(self) -> None:
        """Kill what the session's commands left running (an agent's daemons); the runtime stays
        usable. A grader run here must not share it with what the agent left behind."""
        pids = self.root / ".pids"
        if pids.is_dir() and not pids.is_symlink():
            kill_recorded_groups(self.root)
        kill_session_processes(self.root, int(self.handle.get("pid_floor") or 0))

    # --- commands ----------------------------------------------------------------------------

    def base_env(self) -> dict[str, str]:
        # A clean environment (not the worker's): the runtime sees only what it is given.
        # The harness tools first (as in containers), then this Python's folder, then the worker's PATH.
        tools = [os.path.join(self.tools_dir, "bin")] if self.tools_dir else []
        path = os.pathsep.join([*tools, os.path.dirname(sys.executable), os.environ.get("PATH", "/usr/bin:/bin")])
        return {
            "PATH": path, "HOME": str(self.root / "home"), "TMPDIR": str(self.root / "tmp"),
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb", "POLAR_SESSION_DIR": str(self.root),
            "PYTHONUNBUFFERED": "1",
        }

    def argv(self, command: str, workdir: Path) -> list[str]:
        """How a command is started (the bwrap backend wraps it in a sandbox)."""
        return ["bash", "-c", command]

    def launch(self, command: str, workdir: Path, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """The host process's argv and environment for ``command`` run with ``env``: here the
        command itself. A sandboxing backend starts its launcher with the worker's own
        environment and hands ``env`` to the command inside (the task's PATH or LD_PRELOAD must
        not pick or load what the host runs)."""
        return self.argv(command, workdir), env

    def exec(self, command: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
             timeout: float | None = None, should_cancel: Callable[[], bool] | None = None,
             log_name: str | None = None) -> ExecResult:
        full_env = {**self.base_env(), **self.env, **(env or {})}
        workdir = host_path(self.root, self.workdir, cwd) if cwd else self.workdir
        name = log_name or f"exec-{time.time_ns()}"
        out_path, err_path = self.root / "logs" / f"{name}.stdout", self.root / "logs" / f"{name}.stderr"
        if cancel_marker(self.root).exists():
            return ExecResult(None, cancelled=True)
        started = time.monotonic()
        out, err = open_logs(self.root, name)
        with out, err:
            try:
                argv, launch_env = self.launch(command, workdir, full_env)
                proc = subprocess.Popen(argv, cwd=workdir, env=launch_env,
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                        start_new_session=True)
            except OSError as exc:
                raise ExecError(f"cannot start command in {workdir}: {exc}") from exc
            pids = self.root / ".pids"
            try:
                create_in(pids, str(proc.pid)).close()
            except OSError:
                pass  # the session replaced its .pids folder: the sweep by environment still finds the group
            timed_out = cancelled = False
            exited = _ExitWatch(proc)
            try:
                while proc.poll() is None:
                    elapsed = time.monotonic() - started
                    if timeout is not None and elapsed >= timeout:
                        timed_out = True
                    elif cancel_marker(self.root).exists() or (should_cancel and should_cancel()):
                        cancelled = True
                    if timed_out or cancelled:
                        _terminate_group(proc)
                        break
                    # Woken by the kernel the moment the command ends; otherwise every POLL_SECONDS
                    # for the cancel checks above.
                    exited.wait(POLL_SECONDS if timeout is None else max(0.0, min(POLL_SECONDS, timeout - elapsed)))
                # Killed from another process (``cancel``) before this loop saw the marker.
                cancelled = cancelled or (not timed_out and cancel_marker(self.root).exists())
            finally:
                exited.close()
                # Whatever the command left behind in its group goes with it.
                _killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                remove_in(pids, str(proc.pid))
            return ExecResult(
                exit_code=None if (timed_out or cancelled) else proc.returncode,
                stdout=tail_of(out), stderr=tail_of(err), timed_out=timed_out,
                cancelled=cancelled, duration_seconds=time.monotonic() - started,
                log_paths={"stdout": str(out_path), "stderr": str(err_path)},
            )

    # --- files -------------------------------------------------------------------------------

    def upload(self, src: str, dst: str) -> None:
        upload_into(Path(src), self.root, host_path(self.root, self.workdir, dst))

    def download(self, src: str, dst: str) -> None:
        _copy(host_path(self.root, self.workdir, src), Path(dst))

    def write(self, dst: str, data: bytes) -> None:
        target = host_path(self.root, self.workdir, dst)
        if not target.parent.is_dir():
            target.parent.mkdir(parents=True, exist_ok=True)
        # A link or a named pipe the session left there is replaced, never written through or waited on.
        with create_in(target.parent, target.name) as f:
            f.write(data)

    def path(self, runtime_path: str) -> Path:
        """Where a runtime path is on this host (checked: it stays in the session directory)."""
        return host_path(self.root, self.workdir, runtime_path)

    def reachable_url(self, url: str) -> str:
        return url  # same host, same network


def _mkdir(path: Path) -> None:
    try:
        os.mkdir(path)
    except FileExistsError:  # a restarted INIT (or a re-attached runtime): the folder is there
        if not path.is_dir():
            raise


def _copy(src: Path, dst: Path) -> None:
    if not src.exists():
        raise FileNotFoundError(src)
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, dirs_exist_ok=True, symlinks=True)  # a link stays a link: never its target's content
    else:
        shutil.copy2(src, dst)


class _ExitWatch:
    """Waits for a child to exit without polling: a pidfd becomes readable when it does
    (``Popen.wait(timeout)`` instead wakes up to every few milliseconds to ask). Falls back to
    ``Popen.wait`` where pidfds are missing (Linux < 5.3, other systems)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self._poll: select.poll | None = None
        self._fd: int | None = None
        try:
            self._fd = os.pidfd_open(proc.pid)
            self._poll = select.poll()
            self._poll.register(self._fd, select.POLLIN)
        except (AttributeError, OSError):
            self.close()

    def wait(self, seconds: float) -> None:
        if self._poll is None:
            try:
                self.proc.wait(seconds)
            except subprocess.TimeoutExpired:
                pass
            return
        self._poll.poll(max(0, int(seconds * 1000)))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = self._poll = None


def _terminate_group(proc: subprocess.Popen) -> None:
    _killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    _killpg(proc.pid, signal.SIGKILL)


def kill_recorded_groups(root: Path) -> int:
    """Kill the process groups a session recorded under ``root/.pids``. The folder is the
    session's to write (a link in its place, a pid of another process): only a group whose
    leader carries this session's environment is killed, and nothing there is removed."""
    pids = root / ".pids"
    if pids.is_symlink() or not pids.is_dir():
        return 0
    tag, killed = f"POLAR_SESSION_DIR={root}".encode(), 0
    for pid in _carrying([f.name for f in pids.iterdir() if f.name.isdigit()], tag):
        _killpg(int(pid), signal.SIGKILL)
        killed += 1
    return killed


def kill_session_processes(root: Path, pid_floor: int = 0) -> int:
    """Kill every process started in this session, including those that left its process group
    (``setsid``, double forks): each carries the session's ``POLAR_SESSION_DIR`` in its
    environment. (A process that scrubs its environment escapes this; the bwrap sandbox's PID
    namespace does not let it.) Only processes with a pid above ``pid_floor`` (the runtime's,
    taken when it was made) can be the session's; reading each one's environment costs ~10 us,
    so this stays at raw ``os`` calls (~3x cheaper than through ``Path`` objects)."""
    tag = f"POLAR_SESSION_DIR={root}".encode()
    me = os.getpid()
    floor = _floor_now(pid_floor)
    killed = 0
    for _ in range(3):  # a dying parent may fork once more: sweep until nothing is left
        found = 0
        with os.scandir("/proc") as entries:
            pids = [e.name for e in entries if e.name.isdigit() and int(e.name) >= floor and int(e.name) != me]
        for pid in _carrying(pids, tag):
            try:
                os.kill(int(pid), signal.SIGKILL)
                found += 1
            except (ProcessLookupError, PermissionError):
                pass
        killed += found
        if not found:
            break
        time.sleep(0.05)
    return killed


def newest_pid() -> int:
    """The pid the kernel handed out last (/proc/loadavg's last field); 0 when unknown."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return 0


def _floor_now(floor: int) -> int:
    """``floor`` while it still bounds the session's pids from below: pids are handed out in
    increasing order, unless the kernel's pid counter wrapped around since (the newest pid is
    then lower): 0, every process."""
    return floor if 0 < floor <= newest_pid() else 0


# A process caught inside execve shows an empty environment (the kernel has swapped in the new
# program's memory but not yet laid out its arguments and environment); one that keeps
# re-executing itself is caught there ~40 % of reads. Such ones are read again, all together,
# this often for this long at most (an environment still empty was cleared on purpose: however
# many processes an agent starts so, a sweep waits this long once).
EXEC_REREAD_SECONDS, EXEC_REREAD_FOR_SECONDS = 0.0005, 0.1
_PF_KTHREAD = 0x00200000  # /proc/<pid>/stat flags: a kernel thread (no environment, ever)


def _carrying(pids: list[str], tag: bytes) -> Iterator[str]:
    """The processes among ``pids`` whose environment holds ``tag`` (``KEY=value``). An empty
    environment of a live user process is one caught mid-exec, not an answer: read again (a
    sweep that took it for another's let a daemon exec'ing just then outlive its session)."""
    until = time.monotonic() + EXEC_REREAD_FOR_SECONDS
    while pids:
        unsure = []
        for pid in pids:
            holds = _holds(pid, tag)
            if holds:
                yield pid
            elif holds is None:
                unsure.append(pid)
        if not unsure or time.monotonic() >= until:
            return
        time.sleep(EXEC_REREAD_SECONDS)
        pids = unsure


def _holds(pid: str, tag: bytes) -> bool | None:
    """Whether ``pid``'s environment holds ``tag``; None when it reads empty for a live user
    process (mid-exec, or cleared)."""
    environ = _read_environ(pid)
    if environ is None:
        return False
    if environ:
        # A cheap substring test first; the exact entry (not a longer path that starts the same) after.
        return tag in environ and tag in environ.split(b"\0")
    return None if _user_process(pid) else False  # (a kernel thread or a zombie has none)


def _read_environ(pid: str) -> bytes | None:
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks)


def _user_process(pid: str) -> bool:
    """Alive (not a zombie) and not a kernel thread, by /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return fields[0] not in (b"Z", b"X") and not int(fields[6]) & _PF_KTHREAD
    except (OSError, IndexError, ValueError):
        return False


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass

