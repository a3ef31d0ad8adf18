"""Runtimes and their registry: ``create`` for INIT, ``attach`` (from a handle) for later stages.
Adding a backend: write its module (see ``base.RuntimeBackend``), add one line below."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.errors import ExecError, RuntimeBackendError, RuntimeStartError
from pipeline.registry import Registry
from pipeline.schemas import RuntimeSpec
from workers.runtimes.base import SESSION_MOUNT, ExecResult, Runtime, RuntimeBackend
from workers.runtimes.local import LocalRuntime

BACKENDS: Registry[RuntimeBackend] = Registry("runtime backend", RuntimeBackendError)
BACKENDS.register("local", LocalRuntime)


def create(spec: RuntimeSpec, session_id: str, runtime_root: Path) -> Runtime:
    return BACKENDS.resolve(spec.backend).create(spec, session_id, runtime_root)


def attach(handle: dict[str, Any]) -> Runtime:
    return BACKENDS.resolve(handle["backend"]).attach(handle)


__all__ = ["BACKENDS", "SESSION_MOUNT", "ExecError", "ExecResult", "Runtime", "RuntimeBackend",
           "RuntimeBackendError", "RuntimeStartError", "attach", "create"]
