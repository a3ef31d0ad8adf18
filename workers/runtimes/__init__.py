"""Runtimes and their registry: ``create`` for INIT, ``attach`` (from a handle) for later stages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.registry import Registry
from pipeline.schemas import RuntimeSpec
from workers.runtimes.base import (
    SESSION_MOUNT, ExecError, ExecResult, Runtime, RuntimeError_, RuntimeStartError,
)
from workers.runtimes.local import LocalRuntime

REGISTRY: Registry[Any] = Registry("runtime backend", RuntimeStartError)
REGISTRY.register(LocalRuntime.backend, LocalRuntime)


def create(spec: RuntimeSpec, session_id: str, runtime_root: Path) -> Runtime:
    return REGISTRY.resolve(spec.backend).create(spec, session_id, runtime_root)


def attach(handle: dict[str, Any]) -> Runtime:
    return REGISTRY.resolve(handle["backend"]).attach(handle)


__all__ = ["REGISTRY", "SESSION_MOUNT", "ExecError", "ExecResult", "Runtime", "RuntimeError_",
           "RuntimeStartError", "attach", "create"]
