"""Trajectory builders (pure) and their registry: ``per_request``, ``prefix_merging`` (planned),
or any class given by import path ``package.module:Class`` taking its config as keywords."""

from __future__ import annotations

from typing import Any

from pipeline.builders.base import BuildContext, BuildError, TrajectoryBuilder
from pipeline.builders.per_request import PerRequestBuilder
from pipeline.registry import Registry

REGISTRY: Registry[Any] = Registry("builder", BuildError)
REGISTRY.register(PerRequestBuilder.name, PerRequestBuilder)


def create(strategy: str, config: dict[str, Any] | None = None) -> TrajectoryBuilder:
    return REGISTRY.build(strategy, config)


__all__ = ["REGISTRY", "BuildContext", "BuildError", "TrajectoryBuilder", "create"]
