"""``docker``: a container per session from the task's image, through the Docker API (the
``docker`` SDK; podman's Docker-compatible service works the same, and is what the tests use).

The container idles (``sleep infinity``) and every command is a ``docker exec`` of ``bash -c``
that first writes its process-group id, so a timeout or a cancel kills exactly that command and
everything it started, while the container lives on for evaluation. The session directory on
the host is bind-mounted at ``/polar/session`` (logs, artifacts, the instruction); the harness
tools folder at ``/polar/tools`` read-only. Files move as tar archives. Limits: ``cpus``,
``memory_mb``, ``storage_mb`` (where the storage driver supports it), ``gpus`` (device
requests). Networks: ``host`` (the default with internet), ``bridge`` or a named network (the
host is ``host.containers.internal`` / ``host.docker.internal``), ``none`` (the default without
internet: the proxy is reached through a relay to its Unix socket). Every container is labelled
(project, task, session, host folder) for the sweeper; the engine's clients (control calls wait
``docker_call_timeout_seconds``) and the calls the sweeper makes are in ``docker_engine``.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable
from urllib.parse import urlsplit, urlunsplit

from pipeline.errors import ExecError, RuntimeStartError
from pipeline.schemas import RuntimeSpec
from workers.runtimes import relay
from workers.runtimes.base import (
    IMAGE_USER_SUFFIX,
    SESSION_MOUNT,
    ExecResult,
    RuntimeHost,
    cancel_marker,
    mark_cancelled,
    open_logs,
    owner_session,
    tail_of,
    tools_folder,
    unmark_cancelled,
)
from workers.runtimes.docker_engine import (  # the sweeper and tests call the last two as docker.*
    PROJECT,
    PROJECT_LABEL,
    ControlApi,
    client,
    remove_container,  # noqa: F401
    session_containers,  # noqa: F401
)
from workers.runtimes.docker_files import ContainerFiles
from workers.runtimes.paths import container_path

TOOLS_MOUNT = "/polar/tools"
POLL_SECONDS = 0.1
SESSION_DIRS = ("workspace", "home", "tmp", "logs", "artifacts", ".pids")


class DockerRuntime(ContainerFiles):
    backend = "docker"

    def __init__(self, handle: dict[str, Any]) -> None:
        self.handle = handle
        self.root = Path(handle["root"])
        self.name = handle["container"]
        self.workdir = handle["workdir"]
        self.isolated = handle["network"] == "none"
        self._control = ControlApi(handle.get("docker_host"), float(handle.get("call_timeout") or 30))

    @classmethod
    def create(cls, spec: RuntimeSpec, session_id: str, host: RuntimeHost) -> "DockerRuntime":
        network = spec.effective_network()
        if not spec.allow_internet and network != "none":
            raise RuntimeStartError(f"allow_internet false needs network 'none' (the proxy is reached through a "
                                    f"relay), not {network!r}")
        return cls({
            "backend": cls.backend, "session_id": session_id, "container": f"polar-{session_id}",
            "root": str((host.root / session_id).resolve()), "workdir": spec.workdir or f"{SESSION_MOUNT}/workspace",
            "image": spec.image, "network": network, "env": dict(spec.env), "docker_host": host.docker_host,
            "call_timeout": host.docker_call_timeout,
            "proxy_socket": str(host.proxy_socket) if host.proxy_socket else None,
            "tools_dir": tools_folder(host),
            "limits": {"cpus": spec.cpus, "memory_mb": spec.memory_mb, "storage_mb": spec.storage_mb,
                       "gpus": spec.gpus},
            "task_id": host.task_id,
        })

    @classmethod
    def attach(cls, handle: dict[str, Any]) -> "DockerRuntime":
        return cls(handle)

    @property
    def _docker(self) -> Any:  # the long waits, copying files (every other call: _control)
        return client(self.handle.get("docker_host"))

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        import docker
        import requests

        for sub in SESSION_DIRS:
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        volumes = {str(self.root): {"bind": SESSION_MOUNT, "mode": "rw"}}
        if self.handle.get("tools_dir"):
            volumes[self.handle["tools_dir"]] = {"bind": TOOLS_MOUNT, "mode": "ro"}
        if self.isolated:
            folder, self._socket_name = relay.socket_folder(self.handle.get("proxy_socket"))
            volumes[folder] = {"bind": relay.SOCKET_DIR_MOUNT, "mode": "ro"}  # connecting needs no write
            relay.write_script(self.root)
        try:
            # create + start, not run: run pulls a missing image, and a runtime never downloads
            # (a missing image is the task's error, named, not a surprise pull mid-training).
            self._control.client().containers.create(
                self.handle["image"], entrypoint=["sleep", "infinity"], name=self.name, detach=True,
                labels={PROJECT_LABEL: PROJECT, "polar.task": self.handle["task_id"],
                        "polar.session": owner_session(self.handle["session_id"]),
                        "polar.root": str(self.root.parent), "polar.created": repr(time.time())},
                environment=self._base_env(), network_mode=self.handle["network"], volumes=volumes,
                **self._limits(docker)).start()
            try:
                self._hand_session_to_image_user()
                self._run_quiet(["mkdir", "-p", self.workdir])
            except ExecError:
                self._exited_at_start()
                raise
        except docker.errors.ImageNotFound as exc:
            raise RuntimeStartError(f"image {self.handle['image']!r} is not on this host's container engine "
                                    "(runtimes never pull: pull or load it on the worker host first)") from exc
        except docker.errors.APIError as exc:
            raise RuntimeStartError(f"the container engine refused the runtime: {exc.explanation or exc}") from exc
        except requests.exceptions.Timeout as exc:
            raise RuntimeStartError(self._control.timed_out()) from exc
        except requests.exceptions.RequestException as exc:  # its socket gone
            raise RuntimeStartError(f"cannot reach the container engine ({self._engine_name()}): {exc}") from exc
        if self.isolated:
            self._start_relay()

    def _hand_session_to_image_user(self) -> None:
        """An image whose ``USER`` is not root runs every command as that user: the session folder
        (the worker's) is made its own -- its HOME, workspace, logs and process-group files --
        else the first command cannot even record itself. ``stop`` hands it back (a rootless
        engine's worker could not remove the files otherwise); a marker on the host says so."""
        user = (self._control.inspect_container(self.name).get("Config") or {}).get("User") or ""
        if user.split(":")[0] in ("", "root", "0"):
            return
        if self._run_quiet(["chown", "-R", user, SESSION_MOUNT], root=True) != 0:
            raise RuntimeStartError(f"cannot hand {SESSION_MOUNT} to the image's user {user!r} in {self.name}")
        self._image_user_marker().write_text(user)

    def _exited_at_start(self) -> None:
        """Raise, naming why, when the container stopped as soon as it started: its idle init is
        the image's ``sleep infinity``, and an image whose ``sleep`` does not take it (or ends at
        once) leaves nothing to run commands in."""
        try:
            state = self._control.inspect_container(self.name).get("State") or {}
        except Exception:
            return
        if state.get("Running", True):
            return
        error = f", {state['Error']}" if state.get("Error") else ""
        raise RuntimeStartError(f"the container {self.name} of image {self.handle['image']!r} exited right after "
                                f"its start (exit {state.get('ExitCode')}{error}): the runtime keeps it alive with "
                                "'sleep infinity' as its entrypoint, which must run until it is killed")

    def _engine_name(self) -> str:
        return self.handle.get("docker_host") or "DOCKER_HOST"

    def _limits(self, docker: Any) -> dict[str, Any]:
        limits, out = self.handle["limits"], {}
        if limits.get("cpus"):
            out["nano_cpus"] = int(limits["cpus"] * 1e9)
        if limits.get("memory_mb"):
            out["mem_limit"] = f"{limits['memory_mb']}m"
        if limits.get("storage_mb"):
            out["storage_opt"] = {"size": f"{limits['storage_mb']}m"}
        if limits.get("gpus"):
            if not Path("/dev/nvidiactl").exists():
                raise RuntimeStartError(f"gpus={limits['gpus']} asked for, but this host has no NVIDIA GPU")
            out["device_requests"] = [docker.types.DeviceRequest(count=limits["gpus"], capabilities=[["gpu"]])]
        if self.handle["network"] not in ("host", "none") and not self._is_podman():
            out["extra_hosts"] = {"host.docker.internal": "host-gateway"}
        return out

    def _is_podman(self) -> bool:
        components = self._control.version().get("Components") or []
        return any("podman" in str(c.get("Name", "")).lower() for c in components)

    def _start_relay(self) -> None:
        script = f"{SESSION_MOUNT}/{relay.SCRIPT_PATH}"
        self._control.exec_start(self._control.exec_create(  # (root's: the proxy's socket may be only root's)
            self.name, user="0", cmd=["python3", script, str(relay.RELAY_PORT), f"{relay.SOCKET_DIR_MOUNT}/{self._socket_name}"]
        )["Id"], detach=True)
        deadline = time.monotonic() + 10
        probe = (f"import socket; socket.create_connection(('127.0.0.1', {relay.RELAY_PORT}), 1).close()")
        while self._run_quiet(["python3", "-c", probe]) != 0:
            if time.monotonic() > deadline:
                raise RuntimeStartError("the proxy relay did not start (does the image have python3?)")
            time.sleep(0.1)

    def stop(self) -> None:
        import docker

        handed = self._image_user_marker()
        try:
            if handed.exists():  # back to root's (the worker's, on a rootless engine) before it goes
                self._run_quiet(["chown", "-R", "0:0", SESSION_MOUNT], root=True)
        except ExecError:
            pass
        try:
            self._control.remove_container(self.name, force=True)
        except docker.errors.NotFound:
            pass
        finally:  # the folder goes even when the engine cannot be reached (the sweeper removes the
            # container, by its labels, once the engine answers again)
            shutil.rmtree(self.root, ignore_errors=True)
            unmark_cancelled(self.root)
            handed.unlink(missing_ok=True)

    def _image_user_marker(self) -> Path:
        return self.root.with_name(self.root.name + IMAGE_USER_SUFFIX)

    def cancel(self) -> None:
        mark_cancelled(self.root)
        self.end_processes()

    def end_processes(self) -> None:
        """Kill every process in the container but its idle init (from any process): what the
        session's commands left running; the container stays usable."""
        try:
            self._run_quiet(["bash", "-c", "kill -KILL -1"])
        except ExecError:
            pass

    def reachable_url(self, url: str) -> str:
        if self.isolated:
            return relay.relay_url(url)
        if self.handle["network"] == "host":
            return url
        parts = urlsplit(url)
        host = "host.containers.internal" if self._is_podman() else "host.docker.internal"
        return urlunsplit((parts.scheme, f"{host}:{parts.port or 80}", parts.path, parts.query, parts.fragment))

    # --- commands ----------------------------------------------------------------------------

    def _base_env(self) -> dict[str, str]:
        path = f"{TOOLS_MOUNT}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        return {"HOME": f"{SESSION_MOUNT}/home", "TMPDIR": f"{SESSION_MOUNT}/tmp", "LANG": "C.UTF-8",
                "PATH": path, "TERM": "dumb", "POLAR_SESSION_DIR": SESSION_MOUNT, "PYTHONUNBUFFERED": "1",
                **self.handle.get("env", {})}

    def _run_quiet(self, argv: list[str], root: bool = False) -> int:
        api = self._control
        try:
            exec_id = api.exec_create(self.name, argv, **({"user": "0"} if root else {}))["Id"]
            api.exec_start(exec_id)
            return int(api.exec_inspect(exec_id)["ExitCode"] or 0)
        except Exception as exc:  # the container is gone or the engine refused
            raise ExecError(f"cannot run {argv[0]} in {self.name}: {exc}") from exc

    def exec(self, command: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
             timeout: float | None = None, should_cancel: Callable[[], bool] | None = None,
             log_name: str | None = None) -> ExecResult:
        if cancel_marker(self.root).exists():
            return ExecResult(None, cancelled=True)
        name = log_name or f"exec-{time.time_ns()}"
        out_path, err_path = self.root / "logs" / f"{name}.stdout", self.root / "logs" / f"{name}.stderr"
        pgid_file = f"{SESSION_MOUNT}/.pids/{name}"
        # The exec'd bash leads its own process group: record it, then become the command.
        wrapper = 'echo $$ > "$POLAR_PGID_FILE"; exec bash -c "$POLAR_COMMAND"'
        workdir = container_path(self.workdir, cwd) if cwd else self.workdir  # refused before anything runs
        api = self._control  # (the output is streamed without its wait: only the answer's start has it)
        try:
            exec_id = api.exec_create(
                self.name, ["bash", "-c", wrapper], workdir=workdir,
                environment={**self._base_env(), **(env or {}), "POLAR_COMMAND": command,
                             "POLAR_PGID_FILE": pgid_file})["Id"]
            stream = api.exec_start(exec_id, stream=True, demux=True)
        except Exception as exc:
            raise ExecError(f"cannot start the command in {self.name}: {exc}") from exc
        started = time.monotonic()
        out, err = open_logs(self.root, name)  # the container writes that folder too: never through its links
        reader = threading.Thread(target=_drain, args=(stream, out, err), daemon=True)
        reader.start()
        timed_out = cancelled = False
        while reader.is_alive():
            elapsed = time.monotonic() - started
            if timeout is not None and elapsed >= timeout:
                timed_out = True
            elif cancel_marker(self.root).exists() or (should_cancel is not None and should_cancel()):
                cancelled = True
            if timed_out or cancelled:
                self._kill_group(pgid_file)
                break
            reader.join(POLL_SECONDS if timeout is None else max(0.0, min(POLL_SECONDS, timeout - elapsed)))
        reader.join(timeout=0 if self._control.unanswered else 10)  # a hung engine sends no more
        cancelled = cancelled or (not timed_out and cancel_marker(self.root).exists())
        try:
            code = None if (timed_out or cancelled) else api.exec_inspect(exec_id).get("ExitCode")
        except Exception as exc:  # the engine's API went away under the command
            out.close()
            err.close()
            raise ExecError(f"the container engine stopped answering while {self.name} ran a command "
                            f"({self.handle.get('docker_host') or 'the default engine'}): {exc}") from exc
        if not (timed_out or cancelled) and (code is None or code >= 128):
            self._check_running(out, err)  # killed with its container: no result at all
        with out, err:
            stderr = tail_of(err)
            if code == 128 + 9 and (oom := self._oom_note()):  # SIGKILL: the kernel's, for the memory limit?
                stderr = f"{stderr.rstrip()}\n{oom}".lstrip()
            return ExecResult(exit_code=code, stdout=tail_of(out), stderr=stderr, timed_out=timed_out,
                              cancelled=cancelled, duration_seconds=time.monotonic() - started,
                              log_paths={"stdout": str(out_path), "stderr": str(err_path)})

    def _check_running(self, *logs: Any) -> None:
        """Raise when the container itself stopped under a command (killed from outside, its
        memory limit): the command's signal exit is then the container's end, not the command's
        result. (Nothing inside can stop it: its init ignores signals it has no handler for.)"""
        try:
            state = self._control.inspect_container(self.name).get("State") or {}
        except Exception as exc:  # removed meanwhile, or the engine is away
            state = {"Running": False, "Error": str(exc)}
        if not state.get("Running", True):
            for log in logs:
                log.close()
            why = ", killed for its memory limit" if state.get("OOMKilled") else ""
            raise ExecError(f"the container {self.name} stopped while the command ran (exit "
                            f"{state.get('ExitCode')}{why}){': ' + state['Error'] if state.get('Error') else ''}")

    def _oom_note(self) -> str | None:
        """Why a command died of SIGKILL while its container lives on, when the kernel killed a
        process of the container for its memory limit (the container's own cgroup counts them:
        ``oom_kill`` in cgroup v2's memory.events, v1's memory.oom_control); None otherwise."""
        files = "/sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control"
        try:
            api = self._control
            exec_id = api.exec_create(self.name, ["bash", "-c", f"cat {files} 2>/dev/null"])["Id"]
            text = api.exec_start(exec_id).decode("utf-8", "replace")
        except Exception:  # the container or the engine went away: nothing to say
            return None
        kills = sum(int(f[1]) for f in (line.split() for line in text.splitlines())
                    if len(f) == 2 and f[0] == "oom_kill" and f[1].isdigit())
        if not kills:
            return None
        limit = self.handle["limits"].get("memory_mb")
        return (f"[polar] killed for the container's memory limit ({f'memory_mb={limit}' if limit else 'its memory cgroup'}): "
                f"the kernel's OOM killer ended {kills} process(es) in {self.name}")

    def _kill_group(self, pgid_file: str) -> None:
        try:
            self._run_quiet(["bash", "-c", f'kill -KILL -- -"$(cat {pgid_file})"'])
        except ExecError:
            pass


def _drain(stream: Any, out: BinaryIO, err: BinaryIO) -> None:
    try:
        for stdout, stderr in stream:
            if stdout:
                out.write(stdout)
            if stderr:
                err.write(stderr)
    except Exception:  # the connection broke with the command (killed): what came is kept
        pass

