"""The container engine's side of the ``docker`` runtime that no one session owns: the Docker
API clients (one per engine URL, timeout and process: a client is not shared across a fork),
and the engine-wide calls the sweeper makes -- this project's containers under a host folder,
and removing one by name. ``docker.py`` is the runtime itself."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from pipeline.errors import RuntimeStartError

PROJECT_LABEL = "polar.project"
PROJECT = "polar-rollout"
_clients: dict[str, Any] = {}
_lock = threading.Lock()


def client_key(docker_host: str | None, timeout: float = 120) -> str:
    """Where ``client`` keeps the client of this engine URL and timeout, in this process."""
    return f"{os.getpid()}|{docker_host or ''}|{timeout}"


def client(docker_host: str | None, timeout: float = 120) -> Any:
    """One Docker API client per host URL, timeout and process."""
    import docker

    key = client_key(docker_host, timeout)
    with _lock:
        if key not in _clients:
            try:
                _clients[key] = (docker.DockerClient(base_url=docker_host, timeout=timeout) if docker_host
                                 else docker.from_env(timeout=timeout))
            except docker.errors.DockerException as exc:
                raise RuntimeStartError(f"cannot reach the container engine ({docker_host or 'DOCKER_HOST'}): {exc}") from exc
        return _clients[key]


def session_containers(docker_host: str | None, root: Path, timeout: float = 120) -> list[tuple[str, str, float]]:
    """(container, session, created) of every container this project made for sessions whose
    directories live in ``root`` -- another stack's containers (another root) are not ours."""
    found = []
    for c in client(docker_host, timeout).containers.list(all=True, filters={"label": [
            f"{PROJECT_LABEL}={PROJECT}", f"polar.root={root.resolve()}"]}):
        labels = c.labels or {}
        found.append((c.name, labels.get("polar.session", ""), float(labels.get("polar.created") or 0)))
    return found


def remove_container(docker_host: str | None, name: str, timeout: float = 120) -> None:
    import docker

    try:
        client(docker_host, timeout).containers.get(name).remove(force=True)
    except docker.errors.NotFound:
        pass


__all__ = ["PROJECT", "PROJECT_LABEL", "client", "remove_container", "session_containers"]
