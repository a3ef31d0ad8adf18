"""What a trainer receives: traces (the paper's A.4 shape), trajectories, session/task results."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_serializer, field_validator, model_validator

from pipeline.status import SessionStatus, TaskState

# The content schema (fields and their meaning), the same in JSON and in blobs. How a blob lays
# those fields out is versioned apart: ``blob_version`` (pipeline/blobs, docs/result-blobs.md).
SCHEMA_VERSION = 1


def _plain_if_packed(data: Any) -> Any:
    """A version-2 blob unpacked by a generic msgpack reader validates too, so
    ``SessionResult.model_validate(msgpack.unpackb(blob))`` reads either blob version."""
    if isinstance(data, dict) and "blob_version" in data:
        from pipeline.blobs.plain import plain_from_unpacked  # the layout is loaded only when met

        return plain_from_unpacked(data)
    return data


class TokenLogprob(BaseModel):
    token_id: int
    logprob: float
    token: str | None = None


class Trace(BaseModel):
    """One training sequence. ``loss_mask`` 1.0 marks tokens the behaviour policy sampled."""

    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[float]
    response_logprobs: list[TokenLogprob]
    prompt_messages: list[dict[str, Any]] = Field(default_factory=list)
    response_messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    finish_reason: str | None = None
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _aligned(self) -> "Trace":
        n = len(self.response_ids)
        if len(self.loss_mask) != n or len(self.response_logprobs) != n:
            raise ValueError(
                f"loss_mask ({len(self.loss_mask)}), response_logprobs "
                f"({len(self.response_logprobs)}) and response_ids ({n}) must have equal length"
            )
        for i, (tid, lp) in enumerate(zip(self.response_ids, self.response_logprobs)):
            if lp.token_id != tid:
                raise ValueError(f"response_logprobs[{i}].token_id != response_ids[{i}]")
        return self

    @property
    def trainable_tokens(self) -> int:
        return int(sum(1 for m in self.loss_mask if m))


class Trajectory(BaseModel):
    status: SessionStatus = SessionStatus.COMPLETED
    traces: list[Trace] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_packed_blob(cls, data: Any) -> Any:
        return _plain_if_packed(data)


class SessionTiming(BaseModel):
    """Wall-clock stamps (epoch seconds) per stage; durations are derived, never stored twice."""

    model_config = ConfigDict(extra="ignore")

    registered_at: float | None = None
    init_started_at: float | None = None
    ready_at: float | None = None
    run_started_at: float | None = None
    run_ended_at: float | None = None
    postrun_started_at: float | None = None
    postrun_ended_at: float | None = None
    # The fresh evaluation runtime (evaluator.refresh_runtime), made while the agent runs.
    eval_runtime_started_at: float | None = None
    eval_runtime_ready_at: float | None = None
    evaluate_started_at: float | None = None
    evaluate_ended_at: float | None = None
    finished_at: float | None = None
    # Seconds of RUN the agent's model calls spent waiting out weight-sync pauses: not charged to
    # the session's budget (workers/stages/run_clock.py); absent when there was none.
    # (Left out of a dump while None: blobs of sessions without a pause stay as they were.)
    run_paused_seconds: float | None = Field(default=None, exclude_if=lambda v: v is None)

    @staticmethod
    def _ms(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round((b - a) * 1000.0, 1)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def durations_ms(self) -> dict[str, float | None]:
        return {
            "queue": self._ms(self.registered_at, self.init_started_at),
            "init": self._ms(self.init_started_at, self.ready_at),
            "ready_wait": self._ms(self.ready_at, self.run_started_at),
            "run": self._ms(self.run_started_at, self.run_ended_at),
            "postrun": self._ms(self.postrun_started_at, self.postrun_ended_at),
            "eval_runtime_warmup": self._ms(self.eval_runtime_started_at, self.eval_runtime_ready_at),
            "evaluate": self._ms(self.evaluate_started_at, self.evaluate_ended_at),
            "total": self._ms(self.registered_at, self.finished_at),
        }

    # Polar's SessionTiming names for the same durations (its clients read these).
    @computed_field  # type: ignore[prop-decorator]
    @property
    def register_to_init_queue_ms(self) -> float | None:
        return self._ms(self.registered_at, self.init_started_at)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def init_ms(self) -> float | None:
        return self._ms(self.init_started_at, self.ready_at)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ready_queue_ms(self) -> float | None:
        return self._ms(self.ready_at, self.run_started_at)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def run_ms(self) -> float | None:
        return self._ms(self.run_started_at, self.run_ended_at)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def postrun_queue_ms(self) -> float | None:
        return self._ms(self.run_ended_at, self.postrun_started_at)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def postrun_ms(self) -> float | None:
        return self._ms(self.postrun_started_at, self.postrun_ended_at)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def eval_ms(self) -> float | None:
        return self._ms(self.evaluate_started_at, self.evaluate_ended_at)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def e2e_ms(self) -> float | None:
        return self._ms(self.registered_at, self.finished_at)


class SessionResult(BaseModel):
    """The terminal record of one session; published once to the results stream as msgpack."""

    schema_version: int = SCHEMA_VERSION
    session_id: str
    task_id: str
    sample_index: int = 0
    status: SessionStatus
    reward: float | None = None
    trajectory: Trajectory = Field(default_factory=Trajectory)
    timing: SessionTiming = Field(default_factory=SessionTiming)
    error: str | None = None
    evaluation: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    node_id: str | None = None  # Polar's name: the worker host that graded and finished the session

    @model_validator(mode="before")
    @classmethod
    def _from_packed_blob(cls, data: Any) -> Any:
        return _plain_if_packed(data)

    def summary(self) -> "SessionSummary":
        traces = self.trajectory.traces
        return SessionSummary(
            session_id=self.session_id,
            sample_index=self.sample_index,
            status=self.status,
            reward=self.reward,
            num_traces=len(traces),
            prompt_tokens=sum(len(t.prompt_ids) for t in traces),
            response_tokens=sum(len(t.response_ids) for t in traces),
            trainable_tokens=sum(t.trainable_tokens for t in traces),
            durations_ms=self.timing.durations_ms,
            error=self.error,
        )


class SessionSummary(BaseModel):
    session_id: str
    sample_index: int = 0
    status: SessionStatus
    reward: float | None = None
    num_traces: int = 0
    prompt_tokens: int = 0
    response_tokens: int = 0
    trainable_tokens: int = 0
    durations_ms: dict[str, float | None] = Field(default_factory=dict)
    error: str | None = None


POLAR_FAILED = "failed"  # Polar's terminal word for a task that did not complete


class TaskStatus(BaseModel):
    """A task as the API reports it: a superset of Polar's ``TaskStatus``. On the wire a cancelled
    task's ``status`` is ``failed`` -- Polar's pollers stop on completed or failed only -- with
    ``cancelled: true`` saying why; reading it back gives ``TaskState.CANCELLED`` again."""

    task_id: str
    status: TaskState
    total_sessions: int
    finished_sessions: int = 0
    counts: dict[str, int] = Field(default_factory=dict)  # session status -> count
    sessions: list[SessionSummary] = Field(default_factory=list)
    results: list[SessionResult] = Field(default_factory=list)
    created_at: float | None = None
    finished_at: float | None = None
    callback: dict[str, Any] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    # Polar's field: the results-directory files of the task's finished sessions (sample order).
    result_paths: list[str] = Field(default_factory=list)
    early_stopped: bool = False  # early_stop_min_usable_sessions was reached; the rest were cancelled
    early_stop_min_usable_sessions: int | None = None  # the task's, as submitted

    @field_validator("status", mode="before")
    @classmethod
    def _polar_failed(cls, v: Any) -> Any:
        return TaskState.CANCELLED if v == POLAR_FAILED else v

    @field_serializer("status")
    def _status_on_the_wire(self, v: TaskState) -> str:
        return POLAR_FAILED if v == TaskState.CANCELLED else v.value

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cancelled(self) -> bool:
        return self.status == TaskState.CANCELLED

    @computed_field  # type: ignore[prop-decorator]
    @property
    def completed_sessions(self) -> int:
        """Polar's name for the sessions that have ended (its clients read this one)."""
        return self.finished_sessions
