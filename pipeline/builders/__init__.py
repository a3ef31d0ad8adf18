"""Trajectory builders (pure) and their registry: ``per_request``, ``prefix_merging``,
or any class given by import path ``package.module:Class`` taking its config as keywords."""

from __future__ import annotations

from typing import Any

from pipeline import plugins
from pipeline.builders.base import BuildContext, TrajectoryBuilder
from pipeline.errors import BuildError
from pipeline.registry import Registry

# Adding a builder: write its module (see ``base.TrajectoryBuilder``), add one line to pipeline/plugins.py.
BUILDERS: Registry[type[TrajectoryBuilder]] = Registry.from_catalog("builder", BuildError, plugins.BUILDERS)


def create(strategy: str, config: dict[str, Any] | None = None) -> TrajectoryBuilder:
    builder: TrajectoryBuilder = BUILDERS.build(strategy, config)
    return builder


__all__ = ["BUILDERS", "BuildContext", "BuildError", "TrajectoryBuilder", "create"]
