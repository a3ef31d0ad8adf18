"""Harness adapters and their registry (``shell`` now; the CLI presets build on it)."""

from __future__ import annotations

from pipeline import plugins
from pipeline.errors import HarnessError
from pipeline.registry import Registry
from workers.harnesses.base import AgentCommand, Harness, HarnessContext
from workers.harnesses.env import harness_env, proxy_env

# Adding a harness: write its module (see ``base.Harness``), add one line to pipeline/plugins.py.
HARNESSES: Registry[type[Harness]] = Registry.from_catalog("harness", HarnessError, plugins.HARNESSES)


def create(name: str) -> Harness:
    # Per-session options live in ctx.spec.agent.settings, not in the constructor.
    harness: Harness = HARNESSES.build(name)
    return harness


__all__ = ["HARNESSES", "AgentCommand", "Harness", "HarnessContext", "HarnessError", "create",
           "harness_env", "proxy_env"]
