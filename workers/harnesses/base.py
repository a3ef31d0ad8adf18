"""The harness seam: how one agent CLI is configured and launched inside a runtime.

A harness is small by design: ``setup`` writes whatever config the CLI needs (during INIT, off
the critical path) and ``command`` returns the one shell command RUN executes. Pointing the
agent at the proxy is done through ``HarnessContext.env`` (see ``env.proxy_env``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pipeline.errors import HarnessError  # noqa: F401  (the seam's error, re-exported)
from pipeline.schemas import SessionSpec
from workers.runtimes import Runtime


@dataclass(frozen=True)
class HarnessContext:
    spec: SessionSpec
    env: dict[str, str]  # proxy wiring + runtime env + agent env, already merged


@dataclass(frozen=True)
class AgentCommand:
    command: str
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class Harness(Protocol):
    name: str

    def setup(self, runtime: Runtime, ctx: HarnessContext) -> None: ...

    def command(self, ctx: HarnessContext) -> AgentCommand: ...
