"""Trajectory builders (pure) and their registry: ``per_request``, ``prefix_merging``,
or any class given by import path ``package.module:Class`` taking its config as keywords."""

from __future__ import annotations

from typing import Any

from pipeline.builders.base import BuildContext, TrajectoryBuilder
from pipeline.builders.per_request import PerRequestBuilder
from pipeline.builders.prefix_merging import PrefixMergingBuilder
from pipeline.errors import BuildError
from pipeline.registry import Registry

# Adding a builder: write its module (see ``base.TrajectoryBuilder``), add one line below.
BUILDERS: Registry[type[TrajectoryBuilder]] = Registry("builder", BuildError)
BUILDERS.register("per_request", PerRequestBuilder)
BUILDERS.register("prefix_merging", PrefixMergingBuilder)


def create(strategy: str, config: dict[str, Any] | None = None) -> TrajectoryBuilder:
    builder: TrajectoryBuilder = BUILDERS.build(strategy, config)
    return builder


__all__ = ["BUILDERS", "BuildContext", "BuildError", "TrajectoryBuilder", "create"]
