"""Trajectory builders (pure) and their registry: ``per_request``, ``prefix_merging``,
or any class given by import path ``package.module:Class`` taking its config as keywords."""

from __future__ import annotations

from typing import Any

from pipeline.builders.base import BuildContext, BuildError, TrajectoryBuilder
from pipeline.builders.per_request import PerRequestBuilder
from pipeline.builders.prefix_merging import PrefixMergingBuilder
from pipeline.registry import Registry

REGISTRY: Registry[Any] = Registry("builder", BuildError)
for _cls in (PerRequestBuilder, PrefixMergingBuilder):
    REGISTRY.register(_cls.name, _cls)


def create(strategy: str, config: dict[str, Any] | None = None) -> TrajectoryBuilder:
    return REGISTRY.build(strategy, config)


__all__ = ["REGISTRY", "BuildContext", "BuildError", "TrajectoryBuilder", "create"]
