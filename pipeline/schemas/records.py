"""What the proxy captures per model call (one record per successful upstream completion)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class CompletionRecord(BaseModel):
    """A captured completion: exactly the ids the engine saw and sampled, with their logprobs.

    ``prompt_ids`` are the server's rendering of ``normalized_request`` (never re-tokenised by
    us); ``response_ids``/``response_logprobs`` are the sampled tokens, position by position.
    """

    model_config = ConfigDict(extra="ignore")

    completion_id: str
    session_id: str
    seq: int = 0
    provider: str  # "openai_chat", "anthropic", "openai_responses", "google"
    stream: bool = False
    model: str | None = None  # what the harness asked for
    upstream_model: str | None = None  # what was sent upstream
    upstream_url: str | None = None
    policy_version: str | None = None
    started_at: float
    finished_at: float
    upstream_latency_ms: float
    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float]
    response_tokens: list[str] | None = None
    finish_reason: str | None = None
    stop_reason: Any = None
    usage: dict[str, Any] = Field(default_factory=dict)
    response_message: dict[str, Any] = Field(default_factory=dict)
    original_request: dict[str, Any] = Field(default_factory=dict)
    normalized_request: dict[str, Any] = Field(default_factory=dict)
    upstream_response: dict[str, Any] = Field(default_factory=dict)
    normalizations: list[str] = Field(default_factory=list)  # noise rules applied (proxy/noise.py); what truncation dropped
    # The output-token limit the harness asked for and the one sent (smaller when the proxy
    # clamped it to fit the engine's context, proxy/context_limits.py); None: none was given.
    requested_max_tokens: int | None = None
    sent_max_tokens: int | None = None
    # agent.token_in sessions (proxy/splice.py): whether this call's prompt was spliced from a
    # recorded turn, from which (``source``: its completion id), where its parts are in
    # prompt_ids (``spans``: [start, end, "recorded" | "end_of_turn" | "rendered"]), the engine
    # path it took, or why it was rendered instead (``reason``). None: token-in off.
    token_in: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _aligned(self) -> "CompletionRecord":
        if len(self.response_logprobs) != len(self.response_ids):
            raise ValueError("response_logprobs must align with response_ids")
        if self.response_tokens is not None and len(self.response_tokens) != len(self.response_ids):
            raise ValueError("response_tokens must align with response_ids")
        return self


class UpstreamErrorRecord(BaseModel):
    """A failed model call: kept for diagnosis, never used as training data."""

    model_config = ConfigDict(extra="ignore")

    session_id: str
    seq: int | None = None  # the call's number in its session, as in its request id (None: written before it was kept)
    provider: str
    started_at: float
    finished_at: float
    status_code: int
    error_type: str
    message: str
    original_request: dict[str, Any] = Field(default_factory=dict)
