"""``apptainer``: rootless containers on HPC nodes, through the ``apptainer`` CLI.

``start`` is ``apptainer instance start`` with a writable overlay folder in the session directory
(the image stays read-only), the session directory bound at ``/polar/session``, the tools folder
read-only at ``/polar/tools``, ``--net --network none`` without internet (the proxy's socket is
bound in and a relay serves it on the instance's loopback), ``--nv`` when GPUs are asked for,
and ``--cpus`` / ``--memory`` limits. Images: ``.sif`` files, ``docker://`` and ``docker-daemon:``
references. Commands are ``apptainer exec instance://<name> bash -c ...`` child processes of the
worker, so timeouts and cancels kill them as the local runtime kills its own; files move through
the session directory (``/polar/session``), which is a folder on the host.

No apptainer binary exists for the machines this project is tested on: the command lines are
tested (tests/workers/test_apptainer.py); the real runs happen wherever ``apptainer`` is on PATH.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from pipeline.errors import PathRefused, RuntimeStartError
from pipeline.schemas import RuntimeSpec
from pipeline.schemas.task import SESSION_MOUNT
from workers.runtimes import relay
from workers.runtimes.base import RuntimeHost, tools_folder
from workers.runtimes.local import LocalRuntime, newest_pid
from workers.runtimes.paths import container_path

TOOLS_MOUNT = "/polar/tools"


def binary(configured: str | None) -> str:
    """The apptainer executable: POLAR_APPTAINER_BIN, else on PATH."""
    path = configured or shutil.which("apptainer")
    if not path:
        raise RuntimeStartError("the apptainer backend needs the apptainer CLI on the worker host "
                                "(set POLAR_APPTAINER_BIN, or put apptainer on PATH)")
    return path


IMAGE_SCHEMES = ("docker://", "docker-daemon:", "oras://", "library://")


def check_image(image: str) -> None:
    """An image apptainer can run: a registry or engine reference, or an absolute ``.sif`` path."""
    if image.startswith(IMAGE_SCHEMES):
        return
    if image.startswith("/") and image.endswith(".sif") and ".." not in image.split("/"):
        return
    raise RuntimeStartError(f"apptainer image {image!r}: use an absolute path to a .sif file, or a reference "
                            f"starting with {', '.join(IMAGE_SCHEMES)}")


class ApptainerRuntime(LocalRuntime):
    backend = "apptainer"

    def __init__(self, handle: dict[str, Any]) -> None:
        super().__init__(Path(handle["root"]), Path(handle["root"]) / "workspace", dict(handle.get("env") or {}))
        self.tools_dir = None  # on the host; inside, the tools are at TOOLS_MOUNT (see base_env)
        self.handle = handle
        self.instance = handle["instance"]
        self.container_workdir = handle["workdir"]
        self.isolated = handle["isolated"]

    @classmethod
    def create(cls, spec: RuntimeSpec, session_id: str, host: RuntimeHost) -> "ApptainerRuntime":
        check_image(spec.image or "")
        digest = hashlib.sha256(session_id.encode()).hexdigest()[:8]
        return cls({
            "backend": cls.backend, "session_id": session_id, "root": str((host.root / session_id).resolve()),
            "instance": f"polar-{session_id[:30]}-{digest}", "image": spec.image,
            "workdir": spec.workdir or f"{SESSION_MOUNT}/workspace",
            "isolated": spec.network == "none" or not spec.allow_internet, "env": dict(spec.env),
            "gpus": spec.gpus, "cpus": spec.cpus, "memory_mb": spec.memory_mb,
            "proxy_socket": str(host.proxy_socket) if host.proxy_socket else None,
            "tools_dir": tools_folder(host),
            "apptainer": host.apptainer_bin or shutil.which("apptainer"),
            "pid_floor": newest_pid(),
        })

    @classmethod
    def attach(cls, handle: dict[str, Any]) -> "ApptainerRuntime":
        return cls(handle)

    def start_argv(self, apptainer: str = "apptainer") -> list[str]:
        """The ``instance start`` command line."""
        h, root = self.handle, self.root
        argv = [apptainer, "instance", "start", "--overlay", str(root / "overlay"), "--bind", f"{root}:{SESSION_MOUNT}"]
        if h.get("tools_dir"):
            argv += ["--bind", f"{h['tools_dir']}:{TOOLS_MOUNT}:ro"]
        if self.isolated:
            folder, _ = relay.socket_folder(h.get("proxy_socket"))
            argv += ["--net", "--network", "none", "--bind", f"{folder}:{relay.SOCKET_DIR_MOUNT}:ro"]
        if h.get("gpus"):
            argv.append("--nv")
        if h.get("cpus"):
            argv += ["--cpus", str(h["cpus"])]
        if h.get("memory_mb"):
            argv += ["--memory", f"{h['memory_mb']}M"]
        return [*argv, h["image"], self.instance]

    def start(self) -> None:
        apptainer = binary(self.handle.get("apptainer"))
        if self.isolated:
            relay.socket_folder(self.handle.get("proxy_socket"))  # refused before anything starts
        super().start()
        (self.root / "overlay").mkdir(exist_ok=True)
        if self.isolated:
            relay.write_script(self.root)
        done = subprocess.run(self.start_argv(apptainer), capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeStartError(f"apptainer instance start failed: {done.stderr.strip()[-1000:]}")
        if self.isolated:
            subprocess.Popen([apptainer, "exec", f"instance://{self.instance}", "python3",
                              f"{SESSION_MOUNT}/{relay.SCRIPT_PATH}", str(relay.RELAY_PORT),
                              f"{relay.SOCKET_DIR_MOUNT}/{Path(self.handle['proxy_socket']).name}"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)

    def argv(self, command: str, workdir: Path) -> list[str]:
        """``apptainer exec`` in the instance."""
        return [self.handle.get("apptainer") or "apptainer", "exec", f"instance://{self.instance}",
                "bash", "-c", command]

    def launch(self, command: str, workdir: Path, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """apptainer (an absolute path, found at create) reads the container's environment from its
        own; what the host process itself would act on from a task -- the dynamic loader's
        variables, a PATH -- is kept to the worker's (the container gets its own PATH anyway)."""
        host_env = {k: v for k, v in env.items() if not k.startswith(("LD_", "APPTAINER_", "SINGULARITY_"))}
        host_env["PATH"] = os.environ.get("PATH", os.defpath)
        return self.argv(command, workdir), host_env

    def exec(self, command: str, *, cwd: str | None = None, **kw: Any) -> Any:
        # The working directory is a path in the container, not on the host.
        pwd = container_path(self.container_workdir, cwd) if cwd else self.container_workdir
        return super().exec(f"cd {shlex.quote(pwd)} && {command}", **kw)

    def base_env(self) -> dict[str, str]:
        # apptainer gives the container its own PATH, not the host's; the tools go in front of it.
        tools = {"APPTAINERENV_PREPEND_PATH": f"{TOOLS_MOUNT}/bin"} if self.handle.get("tools_dir") else {}
        return {**super().base_env(), "HOME": f"{SESSION_MOUNT}/home", "TMPDIR": f"{SESSION_MOUNT}/tmp",
                "POLAR_SESSION_DIR": SESSION_MOUNT, **tools}

    def path(self, runtime_path: str) -> Path:
        """Files move through the session directory (a host folder); other container paths
        are the instance's own."""
        target = container_path(self.container_workdir, runtime_path)
        if not (target == SESSION_MOUNT or target.startswith(SESSION_MOUNT + "/")):
            raise PathRefused(f"path {runtime_path!r}: an apptainer runtime moves files only under {SESSION_MOUNT}")
        return super().path(target)

    def upload(self, src: str, dst: str) -> None:
        super().upload(src, str(self.path(dst)).replace(str(self.root), SESSION_MOUNT, 1))

    def download(self, src: str, dst: str) -> None:
        super().download(str(self.path(src)).replace(str(self.root), SESSION_MOUNT, 1), dst)

    def write(self, dst: str, data: bytes) -> None:
        super().write(str(self.path(dst)).replace(str(self.root), SESSION_MOUNT, 1), data)

    def reachable_url(self, url: str) -> str:
        return relay.relay_url(url) if self.isolated else url

    def stop(self) -> None:
        apptainer = self.handle.get("apptainer")
        if apptainer:
            subprocess.run([apptainer, "instance", "stop", self.instance], capture_output=True, timeout=120)
        super().stop()
