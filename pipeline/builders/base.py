"""The builder seam: captured completions in, trajectory out. Pure: no Redis, no HTTP."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pipeline.errors import BuildError  # noqa: F401  (the seam's error, re-exported)
from pipeline.schemas import CompletionRecord, Trajectory


@dataclass(frozen=True)
class BuildContext:
    session_id: str
    task_id: str
    harness: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def trace_metadata(self, builder: str, **extra: Any) -> dict[str, Any]:
        """Provenance every trace carries (the trainer groups and filters on these)."""
        carried: dict[str, Any] = {k: self.metadata[k] for k in ("group_id", "policy_version", "rollout_step")
                                   if k in self.metadata}
        return {"session_id": self.session_id, "task_id": self.task_id, "builder": builder,
                "harness": self.harness, **carried, **extra}


@runtime_checkable
class TrajectoryBuilder(Protocol):
    name: str

    def build(self, completions: list[CompletionRecord], ctx: BuildContext) -> Trajectory: ...
