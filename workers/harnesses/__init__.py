"""Harness adapters and their registry (``shell`` now; the CLI presets build on it)."""

from __future__ import annotations

from typing import Any

from pipeline.registry import Registry
from workers.harnesses.base import AgentCommand, Harness, HarnessContext, HarnessError
from workers.harnesses.env import harness_env, proxy_env
from workers.harnesses.shell import ShellHarness

REGISTRY: Registry[Any] = Registry("harness", HarnessError)
REGISTRY.register(ShellHarness.name, ShellHarness)


def create(name: str) -> Harness:
    # Per-session options live in ctx.spec.agent.settings, not in the constructor.
    return REGISTRY.build(name)


__all__ = ["REGISTRY", "AgentCommand", "Harness", "HarnessContext", "HarnessError", "create",
           "harness_env", "proxy_env"]
