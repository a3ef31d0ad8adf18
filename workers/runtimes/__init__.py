"""Runtimes and their registry: ``create`` for INIT, ``attach`` (from a handle) for later stages.
Adding a backend: write its module (see ``base.RuntimeBackend``), add one line to
``pipeline/plugins.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline import plugins
from pipeline.errors import ExecError, RuntimeBackendError, RuntimeStartError
from pipeline.registry import Registry
from pipeline.schemas import RuntimeSpec
from workers.runtimes.base import SESSION_MOUNT, ExecResult, Runtime, RuntimeBackend, RuntimeHost

BACKENDS: Registry[RuntimeBackend] = Registry.from_catalog("runtime backend", RuntimeBackendError, plugins.RUNTIMES)


def create(spec: RuntimeSpec, session_id: str, host: RuntimeHost | Path) -> Runtime:
    """A new runtime for a session (``host``: a RuntimeHost, or just the folder for session
    directories); a spec without a backend gets ``local``."""
    host = host if isinstance(host, RuntimeHost) else RuntimeHost(root=Path(host))
    return BACKENDS.resolve(spec.backend or "local").create(spec, session_id, host)


def attach(handle: dict[str, Any]) -> Runtime:
    return BACKENDS.resolve(handle["backend"]).attach(handle)


__all__ = ["BACKENDS", "SESSION_MOUNT", "ExecError", "ExecResult", "Runtime", "RuntimeBackend", "RuntimeHost",
           "RuntimeBackendError", "RuntimeStartError", "attach", "create"]
