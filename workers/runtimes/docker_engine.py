"""The container engine's side of the ``docker`` runtime that no one session owns: the Docker
API clients (one per engine URL, timeout and process: a client is not shared across a fork),
a runtime's control calls (``ControlApi``), and the engine-wide calls the sweeper makes -- this
project's containers under a host folder, and removing one by name. ``docker.py`` is the runtime
itself."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from pipeline.errors import EngineNotAnswering, RuntimeStartError

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
    import requests

    key = client_key(docker_host, timeout)
    with _lock:
        if key not in _clients:
            try:
                _clients[key] = (docker.DockerClient(base_url=docker_host, timeout=timeout) if docker_host
                                 else docker.from_env(timeout=timeout))
            except docker.errors.DockerException as exc:  # (a new client asks the engine its API version)
                if isinstance(exc.__cause__, requests.exceptions.Timeout):
                    raise EngineNotAnswering(not_answering(docker_host, timeout)) from exc
                raise RuntimeStartError(f"cannot reach the container engine ({docker_host or 'DOCKER_HOST'}): {exc}") from exc
        return _clients[key]


class ControlApi:
    """One runtime's control calls to the engine's low-level API (``APIClient``'s methods: exec,
    inspect, remove): each waits ``timeout`` for its answer, and once one is not answered in time
    the engine is taken as hung for this runtime -- every later call fails at once with
    ``EngineNotAnswering``, so a stage's kill, cleanup and teardown cost one wait, not one each.
    (A streamed command's output is read without that limit: it is only the answer's start.)"""

    def __init__(self, docker_host: str | None, timeout: float) -> None:
        self.docker_host, self.timeout = docker_host, timeout
        self.unanswered: str | None = None

    def __getattr__(self, name: str) -> Any:
        import requests

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.unanswered is not None:
                raise EngineNotAnswering(self.unanswered)
            try:
                return getattr(self.client().api, name)(*args, **kwargs)
            except requests.exceptions.Timeout as exc:
                raise EngineNotAnswering(self.timed_out()) from exc
        return call

    def client(self) -> Any:
        """The high-level client with this wait (its timeouts go through ``timed_out``)."""
        try:
            return client(self.docker_host, self.timeout)
        except EngineNotAnswering:
            self.timed_out()
            raise

    def timed_out(self) -> str:
        """Take the engine as hung for this runtime; what to say about it."""
        self.unanswered = not_answering(self.docker_host, self.timeout)
        return self.unanswered


def not_answering(docker_host: str | None, timeout: float) -> str:
    return (f"the container engine ({docker_host or 'DOCKER_HOST'}) did not answer within {timeout:g}s "
            "(docker_call_timeout_seconds): is it hung?")


LIST_TRIES = 3


def session_containers(docker_host: str | None, root: Path, timeout: float = 120) -> list[tuple[str, str, float]]:
    """(container, session, created) of every container this project made for sessions whose
    directories live in ``root`` -- another stack's containers (another root) are not ours."""
    import docker

    found = []
    # The list's own rows (one call), not the high-level list, which inspects each container it
    # lists: one removed meanwhile (by a teardown, another sweep) failed the whole listing.
    # Podman 4 fails even this one then ("getting container from store ...: container not
    # known", a 500): the next listing no longer holds it, so it is asked again.
    filters = {"label": [f"{PROJECT_LABEL}={PROJECT}", f"polar.root={root.resolve()}"]}
    for attempt in range(LIST_TRIES):
        try:
            rows = client(docker_host, timeout).api.containers(all=True, filters=filters)
            break
        except docker.errors.APIError as exc:
            if attempt == LIST_TRIES - 1 or "container not known" not in str(exc):
                raise
    for c in rows:
        labels, names = c.get("Labels") or {}, c.get("Names") or [c["Id"]]
        found.append((names[0].lstrip("/"), labels.get("polar.session", ""), float(labels.get("polar.created") or 0)))
    return found


def remove_container(docker_host: str | None, name: str, timeout: float = 120) -> None:
    """Remove a container by name, running or not; one already gone is not an error. (The
    low-level call, as the runtime's teardown makes it: the high-level one inspects it first.)"""
    import docker

    try:
        client(docker_host, timeout).api.remove_container(name, force=True)
    except docker.errors.NotFound:
        pass


__all__ = ["PROJECT", "PROJECT_LABEL", "ControlApi", "client", "remove_container", "session_containers"]
