"""Wire schemas (pydantic): what is submitted, captured, built and published."""

from pipeline.schemas.records import CompletionRecord, UpstreamErrorRecord
from pipeline.schemas.results import (
    SCHEMA_VERSION,
    SessionResult,
    SessionSummary,
    SessionTiming,
    TaskStatus,
    TokenLogprob,
    Trace,
    Trajectory,
)
from pipeline.schemas.task import (
    AgentSpec,
    BuilderSpec,
    EvaluatorSpec,
    PrepareAction,
    RuntimeSpec,
    SessionSpec,
    ShellCommand,
    TaskRequest,
    TokenIn,
)

__all__ = [
    "AgentSpec", "BuilderSpec", "CompletionRecord", "EvaluatorSpec", "PrepareAction",
    "RuntimeSpec", "SCHEMA_VERSION", "SessionResult", "SessionSpec", "SessionSummary",
    "SessionTiming", "ShellCommand", "TaskRequest", "TaskStatus", "TokenIn", "TokenLogprob", "Trace",
    "Trajectory", "UpstreamErrorRecord",
]
