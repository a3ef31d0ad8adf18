"""The builder seam: captured completions in, trajectory out. Pure: no Redis, no HTTP."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pipeline.errors import BuildError  # noqa: F401  (the seam's error, re-exported)
from pipeline.schemas import CompletionRecord, Trajectory

# The request fields that shape the distribution a call's tokens were drawn from. An engine's
# logprobs are the model's own (vLLM's default), not those of the distribution these truncate or
# reshape (a harness's top_k, its temperature): a trainer correcting for how a token was sampled
# needs them, call by call. Empty: the engine's defaults.
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                   "repetition_penalty", "logit_bias", "seed")


def sampling_of(request: dict[str, Any]) -> dict[str, Any]:
    """The sampling settings a call was sent with (its normalized request's)."""
    return {k: request[k] for k in SAMPLING_FIELDS if request.get(k) is not None}


@dataclass(frozen=True)
class BuildContext:
    session_id: str
    task_id: str
    harness: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def policy_version(self, stamped: str | None) -> str | None:
        """The policy version a trace reports: the task's ``metadata.policy_version`` when it
        names one -- the trainer's own word for what it submitted under -- else what the proxy
        stamped when the call was admitted (its last resume's version). The proxy's stamp
        outlives the run that set it (a later run that never resumes with a version would be
        stamped with an old one); each record and merged turn keeps it as ``proxy_policy_version``."""
        own = self.metadata.get("policy_version")
        return str(own) if own is not None else stamped

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
