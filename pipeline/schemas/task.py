"""What a trainer submits: ``TaskRequest`` and the specs inside it.

Unknown fields are refused (``extra="forbid"``): a typo such as ``timout_seconds`` would
otherwise silently run with the default. Strategy and harness names are checked against the
catalogue below or must be an import path (``package.module:Name``) for a custom plug-in.
The paper's A.3 payload, placeholders and all, parses unchanged.
"""

from __future__ import annotations

import re
import uuid
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from pipeline import plugins
from pipeline.credentials import new_session_id

IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# Task ids end up in URLs and Redis keys: printable, no slash, no whitespace.
TASK_ID = re.compile(r"^[^\s/\\\x00-\x1f\x7f]{1,200}$")

# Names the pipeline accepts: the plug-in catalogue (pipeline/plugins.py); a planned name not
# yet implemented fails its session with a clear error instead of being refused at submit time.
HARNESSES = (*plugins.HARNESSES, *plugins.PLANNED["harness"])
BUILDERS = tuple(plugins.BUILDERS)
EVALUATORS = (*plugins.EVALUATORS, *plugins.PLANNED["evaluator strategy"])
RUNTIME_BACKENDS = (*plugins.RUNTIMES, *plugins.PLANNED["runtime backend"])


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _known_name(field: str, known: tuple[str, ...], what: str) -> Any:
    """A validator accepting a catalogued name or a plug-in import path for ``field``."""

    def check(cls: type, value: str | None) -> str | None:
        if value is None or value in known or IMPORT_PATH.match(value):
            return value
        raise ValueError(f"unknown {what} {value!r}; expected one of {', '.join(known)} "
                         f"or an import path 'package.module:Name'")

    return field_validator(field)(check)


class PrepareAction(_Spec):
    """One INIT step inside the runtime."""

    type: Literal["exec", "upload_file", "upload_dir"]
    command: str | None = None
    src: str | None = None
    dst: str | None = None
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _fields_for_type(self) -> "PrepareAction":
        if self.type == "exec" and not self.command:
            raise ValueError("an 'exec' prepare action needs 'command'")
        if self.type != "exec" and not (self.src and self.dst):
            raise ValueError(f"an '{self.type}' prepare action needs 'src' and 'dst'")
        return self


class RuntimeSpec(_Spec):
    backend: str = "local"
    image: str | None = None
    prepare: list[PrepareAction] = Field(default_factory=list)
    eval_prepare: list[PrepareAction] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    network: str | None = None
    workdir: str | None = None
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: StrictInt | None = Field(default=None, gt=0)
    allow_internet: StrictBool = True
    kwargs: dict[str, Any] = Field(default_factory=dict)

    _known_backend = _known_name("backend", RUNTIME_BACKENDS, "runtime backend")


class ShellCommand(_Spec):
    """The ``shell`` harness: a command template; ``{{INSTRUCTION}}`` is replaced, shell-quoted."""

    command: str
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)


class AgentSpec(_Spec):
    harness: str | None = None
    custom_shell: ShellCommand | None = None
    model_name: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("custom_shell", mode="before")
    @classmethod
    def _shell_from_string(cls, v: Any) -> Any:
        return {"command": v} if isinstance(v, str) else v

    _known_harness = _known_name("harness", HARNESSES, "harness")

    @model_validator(mode="after")
    def _harness_or_shell(self) -> "AgentSpec":
        if self.harness is None:
            if self.custom_shell is None:
                raise ValueError("set 'harness' or 'custom_shell'")
            self.harness = "shell"
        if self.harness == "shell" and self.custom_shell is None:
            raise ValueError("the 'shell' harness needs 'custom_shell'")
        return self


class BuilderSpec(_Spec):
    strategy: str = "per_request"
    config: dict[str, Any] = Field(default_factory=dict)

    _known_strategy = _known_name("strategy", BUILDERS, "builder strategy")


class EvaluatorSpec(_Spec):
    strategy: str = "session_completed"
    config: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    refresh_runtime: StrictBool = False

    _known_strategy = _known_name("strategy", EVALUATORS, "evaluator strategy")


class TaskRequest(_Spec):
    task_id: str = Field(default_factory=lambda: f"task-{uuid.uuid4().hex[:12]}")
    instruction: str
    num_samples: StrictInt = Field(default=1, ge=1, le=4096)
    timeout_seconds: float = Field(default=600, gt=0, le=7 * 24 * 3600)
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    agent: AgentSpec
    builder: BuilderSpec = Field(default_factory=BuilderSpec)
    evaluator: EvaluatorSpec = Field(default_factory=EvaluatorSpec)
    callback_url: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("task_id")
    @classmethod
    def _task_id(cls, v: str) -> str:
        if not TASK_ID.match(v):
            raise ValueError("task_id must be 1-200 printable characters without '/' or spaces")
        return v

    @field_validator("evaluator", mode="before")
    @classmethod
    def _null_evaluator(cls, v: Any) -> Any:
        return EvaluatorSpec() if v is None else v

    @field_validator("callback_url")
    @classmethod
    def _callback_url(cls, v: str | None) -> str | None:
        # Templated URLs (the A.3 payload's "{trainer_host}") are accepted; only the scheme
        # is checked here, the POST itself reports an unusable URL.
        if v is not None and not re.match(r"^https?://\S+$", v):
            raise ValueError("callback_url must be an http:// or https:// URL")
        return v


class SessionSpec(_Spec):
    """One sample of a task: what every stage of one session needs to know."""

    session_id: str
    task_id: str
    sample_index: int
    instruction: str
    timeout_seconds: float
    runtime: RuntimeSpec
    agent: AgentSpec
    builder: BuilderSpec
    evaluator: EvaluatorSpec
    metadata: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def expand(cls, task: TaskRequest) -> list["SessionSpec"]:
        return [
            cls(
                session_id=new_session_id(),
                task_id=task.task_id,
                sample_index=i,
                instruction=task.instruction,
                timeout_seconds=task.timeout_seconds,
                runtime=task.runtime,
                agent=task.agent,
                builder=task.builder,
                evaluator=task.evaluator,
                metadata=dict(task.metadata),
            )
            for i in range(task.num_samples)
        ]

