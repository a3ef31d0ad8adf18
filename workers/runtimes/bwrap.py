"""``bwrap``: the local runtime inside a bubblewrap sandbox (Debian's ``bubblewrap``; no root).

Each command runs in its own sandbox, without capabilities: the host's filesystem read-only, but
for what the sandbox does not see at all (the service's folders -- POLAR_HOME with its secrets and
Redis's files, the sessions', the results -- the worker user's home and root's, the ``.env``, the
password hashes, ``/run``, the shared ``/tmp`` and ``/var/tmp``, and the container engine's socket),
the session directory writable
(and the harness tools and this Python readable), fresh PID/IPC/UTS namespaces with
``--die-with-parent``, so when the command ends or is
killed, everything it started -- ``setsid`` daemons included -- ends with it (a background
process does not outlive its step). ``network: none`` or ``allow_internet: false`` also unshares
the network: the proxy is then reached through a relay to its Unix socket, bound into the sandbox.
bwrap itself is started by its absolute path with the worker's environment; the command's
environment is set inside (``launch``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

from pipeline.errors import RuntimeStartError
from workers.runtimes import relay
from workers.runtimes.base import RuntimeHost
from workers.runtimes.local import LocalRuntime


class BwrapRuntime(LocalRuntime):
    backend = "bwrap"

    def __init__(self, root: Path, workdir: Path, env: dict[str, str], isolated: bool = False,
                 proxy_socket: str | None = None, tools_dir: str | None = None, pid_floor: int | None = None,
                 hidden: list[str] | str | None = None) -> None:
        super().__init__(root, workdir, env, tools_dir, pid_floor)
        self.isolated = isolated
        self.proxy_socket = proxy_socket
        self.hidden = [hidden] if isinstance(hidden, str) else hidden or [str(root.parent.resolve())]
        self.handle.update(backend=self.backend, isolated=isolated, proxy_socket=proxy_socket, hidden=self.hidden)

    @classmethod
    def create(cls, spec: Any, session_id: str, host: RuntimeHost) -> "BwrapRuntime":
        local = LocalRuntime.create(spec, session_id, host)
        isolated = spec.network == "none" or not spec.allow_internet
        hidden = _outermost([str(p.resolve()) for p in (*host.private, host.root)])
        runtime = cls(local.root, local.workdir, local.env, isolated,
                      str(host.proxy_socket) if host.proxy_socket else None, local.tools_dir,
                      local.handle["pid_floor"], hidden)
        runtime.handle["engine_sockets"] = _engine_sockets(host.docker_host)
        return runtime

    @classmethod
    def attach(cls, handle: dict[str, Any]) -> "BwrapRuntime":
        return cls(Path(handle["root"]), Path(handle["workdir"]), dict(handle.get("env") or {}),
                   bool(handle.get("isolated")), handle.get("proxy_socket"), handle.get("tools_dir"),
                   int(handle.get("pid_floor") or 0), handle.get("hidden"))

    def start(self) -> None:
        _bwrap()
        if self.isolated:
            relay.socket_folder(self.proxy_socket)  # refused early: no socket, or a folder with more in it
        super().start()
        if self.isolated:
            relay.write_script(self.root)

    def launch(self, command: str, workdir: Path, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """bwrap by its absolute path, with the worker's environment; the command's environment
        is set inside the sandbox (``--clearenv``, ``--setenv``). The task's environment on the
        host process let a task PATH with a relative folder run a bwrap the agent wrote in its
        workspace, on the host, and LD_PRELOAD would load the agent's library there."""
        host_env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8",
                    "POLAR_SESSION_DIR": str(self.root)}  # (the sweep knows a session's processes by it)
        return self.argv(command, workdir, env), host_env

    def reachable_url(self, url: str) -> str:
        return relay.relay_url(url) if self.isolated else url

    def argv(self, command: str, workdir: Path, env: dict[str, str] | None = None) -> list[str]:
        """The sandboxed command; ``env``: its whole environment, set inside (else bwrap's own)."""
        root = str(self.root)
        # The service's folders are empty tmpfs in the sandbox; the session (and the tools, when
        # they live there) are bound back into them. No capabilities: a worker running as root
        # would otherwise hand them to the sandbox, which could unmount what hides the secrets.
        # The sandbox runs as the worker's user (root, on many hosts): what that user owns is also
        # hidden -- its home folders, the settings' .env, the password hashes.
        # The shared temporary folders too: other stacks' homes, the worker's grading folders,
        # anything a host process left there (the session has its own TMPDIR). And the host's
        # services' state: a container engine's storage holds every container's files and the
        # environment of its commands (a docker session's proxy key), a database's its data.
        hidden = _outermost([*self.hidden, *_user_homes(), *(t for t in SHARED_TMP if os.path.isdir(t)),
                             *_host_state()])
        masks = [arg for folder in hidden for arg in ("--tmpfs", folder)]
        # A read-only bind does not stop connect(): the host's sockets (a container engine's API,
        # the system bus) would hand the sandbox the host. /run goes (the resolver's folder stays),
        # and a container engine's socket elsewhere is covered.
        masks += _run_mask()
        covered = [*(self.handle.get("engine_sockets") or []), *SECRET_FILES, str(Path(".env").resolve())]
        masks += [arg for path in covered if os.path.exists(path) for arg in ("--ro-bind", "/dev/null", path)]
        # What sessions run on, bound back where it lives in a hidden folder: the harness tools,
        # this Python (a venv and the interpreter it was made from, e.g. under ~/.pyenv).
        needed = {str(Path(p).resolve()) for p in (self.tools_dir, sys.prefix, sys.base_prefix) if p}
        tools = [arg for p in sorted(needed) if any(_within(p, h) for h in hidden) for arg in ("--ro-bind", p, p)]
        setenv = [] if env is None else ["--clearenv", *(a for k, v in env.items() for a in ("--setenv", k, v))]
        args = [_bwrap(), "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                "--cap-drop", "ALL", "--ro-bind", "/", "/", *masks, *tools, "--dev", "/dev", "--proc", "/proc",
                *_proc_masks(), "--bind", root, root, "--chdir", str(workdir), *setenv]
        if not self.isolated:
            return [*args, "--", "bash", "-c", command]
        folder, name = relay.socket_folder(self.proxy_socket)
        script, mount = str(self.root / relay.SCRIPT_PATH), str(self.root / ".polar" / "proxy")
        socket = f"{mount}/{name}"
        # The relay lives in the sandbox's own network namespace, beside the command, which
        # starts once it listens.
        inner = (f"python3 {script} {relay.RELAY_PORT} {socket} & "
                 f"for _ in $(seq 100); do (: > /dev/tcp/127.0.0.1/{relay.RELAY_PORT}) 2>/dev/null && break; "
                 'sleep 0.05; done; exec bash -c "$0"')
        return [*args, "--unshare-net", "--ro-bind", folder, mount, "--", "bash", "-c", inner, command]


def _bwrap() -> str:
    """bubblewrap's absolute path, found on the worker's PATH (never a task's)."""
    found = shutil.which("bwrap", path=os.environ.get("PATH", os.defpath))
    if found is None:
        raise RuntimeStartError("the bwrap backend needs bubblewrap on the worker host (apt install bubblewrap)")
    return os.path.abspath(found)


def _within(path: str, folder: str) -> bool:
    return Path(path).resolve().is_relative_to(Path(folder).resolve())


def _outermost(folders: list[str]) -> list[str]:
    """The folders, without those inside another of them (masked with it), outermost first."""
    unique = sorted(set(folders), key=len)
    return [f for i, f in enumerate(unique) if not any(_within(f, o) for o in unique[:i])]


def _engine_sockets(docker_host: str | None) -> list[str]:
    """The container engine sockets the worker host may have outside /run (the configured one, DOCKER_HOST's)."""
    found = []
    for url in (docker_host, os.environ.get("DOCKER_HOST")):
        if url and url.startswith("unix://"):
            found.append(str(Path(url[len("unix://"):]).resolve()))
    return sorted(set(found))


def _run_mask() -> list[str]:
    run = Path("/run")
    if not run.is_dir() or run.is_symlink():
        return []
    keep = []
    resolver = Path("/etc/resolv.conf").resolve()
    if resolver.is_relative_to(run) and resolver.parent.is_dir():
        keep = ["--ro-bind", str(resolver.parent), str(resolver.parent)]  # DNS for sessions with a network
    return ["--tmpfs", "/run", *keep]


SHARED_TMP = ("/tmp", "/var/tmp")
# The kernel's controls in the sandbox's fresh /proc, as container engines leave them: a sandbox
# running as root (with no capabilities) could still write sysctls -- core_pattern runs a program
# as root on the host at the next crash -- so those are read-only, and what leaks the host's
# memory, keys or timers is hidden. (bwrap covers /proc/sys itself only when it finds it writable.)
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
PROC_HIDDEN_FILES = ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/latency_stats",
                     "/proc/timer_stats")
PROC_HIDDEN_FOLDERS = ("/proc/acpi", "/proc/scsi", "/proc/asound")
SECRET_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
HOST_STATE = ("/var/lib/containers", "/var/lib/docker", "/var/lib/containerd", "/var/lib/kubelet", "/var/lib/cni",
              "/var/lib/redis", "/var/lib/valkey", "/var/lib/postgresql", "/var/lib/mysql", "/var/lib/mongodb",
              "/var/lib/rabbitmq", "/var/log")


def _proc_masks() -> list[str]:
    """Arguments after ``--proc /proc``, for what the host's /proc has (a missing target is an error)."""
    args = [a for p in PROC_READ_ONLY if os.path.exists(p) for a in ("--ro-bind", p, p)]
    args += [a for p in PROC_HIDDEN_FILES if os.path.exists(p) for a in ("--ro-bind", "/dev/null", p)]
    return args + [a for p in PROC_HIDDEN_FOLDERS if os.path.isdir(p) for a in ("--tmpfs", p)]


def _host_state() -> list[str]:
    """Where the host's container engines and data services keep their state (the engines'
    configured storage included), and its logs: the folders of these that exist."""
    found = list(HOST_STATE)
    try:  # podman / buildah / cri-o: [storage] graphroot, runroot
        with open("/etc/containers/storage.conf", "rb") as f:
            storage = tomllib.load(f).get("storage") or {}
        found += [v for k in ("graphroot", "runroot") if isinstance(v := storage.get(k), str)]
    except (OSError, ValueError):
        pass
    try:  # docker: data-root
        with open("/etc/docker/daemon.json") as f:
            root = json.load(f).get("data-root")
        found += [root] if isinstance(root, str) else []
    except (OSError, ValueError, AttributeError):
        pass
    return [p for p in found if os.path.isabs(p) and os.path.isdir(p) and p != "/"]


def _user_homes() -> list[str]:
    """The worker user's home folder, and root's (where keys and credentials live)."""
    homes = {str(Path.home().resolve()), "/root"}
    return [h for h in homes if h != "/" and os.path.isdir(h)]
