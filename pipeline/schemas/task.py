"""What a trainer submits: ``TaskRequest`` and the specs inside it.

Unknown fields are refused (``extra="forbid"``): a typo such as ``timout_seconds`` would
otherwise silently run with the default. Strategy and harness names are checked against the
catalogue below or must be an import path (``package.module:Name``) for a custom plug-in.
The paper's A.3 payload, placeholders and all, parses unchanged.
"""

from __future__ import annotations

import math
import re
import uuid
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from pipeline import plugins
from pipeline.credentials import new_session_id
from pipeline.schemas.harness import HarnessOptions
from pipeline.schemas.ids import check_task_id

SESSION_MOUNT = "/polar/session"  # where the session directory appears inside every runtime
IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _env_vars(env: dict[str, str]) -> dict[str, str]:
    """Names a shell can export and values without a NUL byte: refused at submit, not at run time."""
    for name, value in env.items():
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"environment variable name {name!r} must be letters, digits and '_', not starting "
                             "with a digit")
        if "\0" in value:
            raise ValueError(f"environment variable {name} holds a NUL byte")
    return env


def _no_bool(value: Any) -> Any:
    if isinstance(value, bool):  # pydantic would read true as 1 second
        raise ValueError("must be a number of seconds, not a boolean")
    return value


def _no_nul(value: str) -> str:
    if "\0" in value:
        raise ValueError("must not contain a NUL byte")
    return value


EnvVars = Annotated[dict[str, str], AfterValidator(_env_vars)]
Seconds = Annotated[float, BeforeValidator(_no_bool)]
Text = Annotated[str, AfterValidator(_no_nul)]
NonEmptyText = Annotated[str, AfterValidator(_no_nul), Field(min_length=1, pattern=r"\S")]

# Names the pipeline accepts: the plug-in catalogue (pipeline/plugins.py); a planned name not
# yet implemented fails its session with a clear error instead of being refused at submit time.
HARNESSES = (*plugins.HARNESSES, *plugins.PLANNED["harness"])
BUILDERS = tuple(plugins.BUILDERS)
EVALUATORS = (*plugins.EVALUATORS, *plugins.PLANNED["evaluator strategy"])
RUNTIME_BACKENDS = (*plugins.RUNTIMES, *plugins.PLANNED["runtime backend"])


class _Spec(BaseModel):
    # cache_strings="keys": pydantic-core otherwise keeps every short string value of the JSON it
    # parses in a process-wide table (16,384 entries); a session's id and its task's id, parsed in
    # every stage, would each take a slot no later parse ever hits (~100 B a session per process).
    model_config = ConfigDict(extra="forbid", cache_strings="keys")


def _known_name(field: str, known: tuple[str, ...], what: str) -> Any:
    """A validator accepting a catalogued name or a plug-in import path for ``field``."""

    def check(cls: type, value: str | None) -> str | None:
        if value is None or value in known or IMPORT_PATH.fullmatch(value):
            return value
        raise ValueError(f"unknown {what} {value!r}; expected one of {', '.join(known)} "
                         f"or an import path 'package.module:Name'")

    return field_validator(field)(check)


def runtime_path_problem(path: str) -> str | None:
    """Why a path inside a runtime is unacceptable (NUL bytes, ``..`` components), else None.
    Where it may point (e.g. only under the session directory for ``local``) is the backend's
    check, at run time, against the real filesystem."""
    if "\x00" in path:
        return "must not contain NUL bytes"
    if ".." in path.replace("\\", "/").split("/"):
        return "must not contain '..' (paths stay inside the session's filesystem)"
    return None


class PrepareAction(_Spec):
    """One INIT step inside the runtime. Polar's field names are accepted too (``source`` /
    ``target`` for ``src`` / ``dst``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    type: Literal["exec", "upload_file", "upload_dir"]
    command: str | None = None
    src: str | None = Field(default=None, validation_alias=AliasChoices("src", "source"))  # a path on the worker host
    dst: str | None = Field(default=None, validation_alias=AliasChoices("dst", "target"))  # a path in the runtime
    cwd: str | None = None
    env: EnvVars = Field(default_factory=dict)
    timeout_seconds: Seconds | None = Field(default=None, gt=0)
    max_attempts: StrictInt = Field(default=1, ge=1, le=10)  # exec: tries before the step fails
    retry_backoff_seconds: Seconds = Field(default=0.0, ge=0, le=60)  # exec: wait between tries

    @model_validator(mode="after")
    def _fields_for_type(self) -> "PrepareAction":
        if self.type == "exec" and not self.command:
            raise ValueError("an 'exec' prepare action needs 'command'")
        if self.type == "exec" and (self.src or self.dst):
            raise ValueError("an 'exec' prepare action takes no src or dst (an upload action copies files)")
        if self.type != "exec":
            if not (self.src and self.dst):
                raise ValueError(f"an '{self.type}' prepare action needs 'src' and 'dst' (or 'source' and 'target')")
            extras = [f for f in ("command", "cwd") if getattr(self, f)] + (["env"] if self.env else []) + (
                ["max_attempts"] if self.max_attempts != 1 else []) + (
                ["retry_backoff_seconds"] if self.retry_backoff_seconds else [])
            if extras:
                raise ValueError(f"an '{self.type}' prepare action takes no {', '.join(extras)}")
        for name in ("dst", "cwd"):
            value = getattr(self, name)
            why = runtime_path_problem(value) if value else None
            if why:
                raise ValueError(f"{name} {value!r} {why}")
        return self


class RuntimeSpec(_Spec):
    """Where a session runs. ``backend`` None means the service's default
    (``POLAR_DEFAULT_RUNTIME_BACKEND``); the API fills it in at submit."""

    backend: str | None = None
    image: str | None = None
    prepare: list[PrepareAction] = Field(default_factory=list)
    eval_prepare: list[PrepareAction] | None = None
    env: EnvVars = Field(default_factory=dict)
    network: str | None = None  # none | host | bridge | a network name (backends that have networks)
    workdir: str | None = None
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: StrictInt | None = Field(default=None, gt=0)
    storage_mb: StrictInt | None = Field(default=None, gt=0)
    gpus: StrictInt = Field(default=0, ge=0)
    allow_internet: StrictBool = True
    kwargs: dict[str, Any] = Field(default_factory=dict)

    _known_backend = _known_name("backend", RUNTIME_BACKENDS, "runtime backend")

    @model_validator(mode="after")
    def _backend_can_honour(self) -> "RuntimeSpec":
        if self.workdir and runtime_path_problem(self.workdir):
            raise ValueError(f"workdir {self.workdir!r} {runtime_path_problem(self.workdir)}")
        honoured = plugins.RUNTIME_FIELDS.get(self.backend or "")
        if honoured is None:
            return self  # the default backend (checked once filled in) or a plug-in: its own business
        defaults: dict[str, Any] = {"image": None, "network": None, "workdir": None, "cpus": None, "memory_mb": None,
                                    "storage_mb": None, "gpus": 0, "allow_internet": True, "kwargs": {}}
        refused = [f for f, default in defaults.items() if getattr(self, f) != default and f not in honoured]
        if refused:
            raise ValueError(f"runtime backend {self.backend!r} cannot honour {', '.join(refused)}: "
                             "choose a backend that can, or leave them out")
        if self.backend in plugins.IMAGE_BACKENDS and not self.image:
            raise ValueError(f"runtime backend {self.backend!r} needs an image")
        if self.network not in (None, "none", "host") and self.backend == "bwrap":
            raise ValueError("the bwrap backend's network is 'none' or 'host'")
        if self.backend in ("local", "bwrap") and self.workdir and self.workdir.startswith("/") \
                and not (self.workdir + "/").startswith(SESSION_MOUNT + "/"):
            raise ValueError(f"workdir {self.workdir!r}: a {self.backend} runtime's absolute paths are under "
                             f"{SESSION_MOUNT} (the session directory)")
        return self


    def effective_network(self) -> str:
        """The network the session gets: "none", "host" (the worker host's, its loopback with
        it), or what ``network`` names for a backend that has networks of its own (docker)."""
        if self.backend == "local":
            return "host"
        if self.backend in ("bwrap", "apptainer"):
            return "none" if self.network == "none" or not self.allow_internet else "host"
        return self.network or ("host" if self.allow_internet else "none")


class ShellCommand(_Spec):
    """The ``shell`` harness: a command template; ``{{INSTRUCTION}}`` is replaced, shell-quoted."""

    command: NonEmptyText
    cwd: str | None = None
    env: EnvVars = Field(default_factory=dict)


class TokenIn(str, Enum):
    """``agent.token_in``: how the proxy builds the prompt of a call that continues a turn it
    recorded (proxy/splice.py, docs/token-in.md). ``off``: the engine renders every call from its
    messages. ``auto``: such a call's prompt is the recorded prompt + the sampled ids + the new
    messages' ids, sent as ids (never drifts from what was sampled); a call that matches no
    recorded turn is rendered, with the reason recorded. ``strict``: as auto, but such a call is
    refused (400) instead of rendered."""

    OFF = "off"
    AUTO = "auto"
    STRICT = "strict"


class AgentSpec(_Spec):
    harness: str | None = None
    custom_shell: ShellCommand | None = None
    model_name: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    env: EnvVars = Field(default_factory=dict)
    # Polar's names, folded into the fields above: a custom adapter's import path is the
    # harness; MCP servers and the skills folder are preset settings.
    import_path: str | None = None
    mcp_servers: list[dict[str, Any]] | None = None
    skills_path: str | None = None
    token_in: TokenIn = TokenIn.OFF  # default off until measured: see TokenIn
    # The session's budget in model calls (every call the proxy admits, refused ones included):
    # the next is refused and RUN stops the agent, a TIMEOUT (a harness looping on an error).
    max_model_calls: StrictInt | None = Field(default=None, ge=1, le=1_000_000)

    @model_validator(mode="before")
    @classmethod
    def _polar_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("import_path"):
            if data.get("harness") not in (None, data["import_path"]):
                raise ValueError("give 'harness' or 'import_path', not both")
            data["harness"] = data["import_path"]
        folded = {k: data[k] for k, target in (("mcp_servers", "mcp_servers"), ("skills_path", "skills_dir"))
                  if data.get(k) is not None}
        if folded:
            settings = dict(data.get("settings") or {})
            for polar_name, value in folded.items():
                target = "skills_dir" if polar_name == "skills_path" else polar_name
                if target in settings:
                    raise ValueError(f"'{polar_name}' is also set as settings.{target}: give it once")
                settings[target] = value
            data["settings"] = settings
        return data

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
        if self.harness not in plugins.CLI_PRESETS and (self.mcp_servers or self.skills_path):
            raise ValueError(f"mcp_servers and skills_path are for the CLI presets ({', '.join(plugins.CLI_PRESETS)}), "
                             f"not the {self.harness!r} harness")
        if self.harness in plugins.CLI_PRESETS:
            if self.custom_shell is not None:
                raise ValueError(f"the {self.harness!r} preset runs its own CLI: leave 'custom_shell' out")
            HarnessOptions.model_validate(self.settings)  # errors name the setting (agent.settings.<field>)
        return self


class BuilderSpec(_Spec):
    strategy: str = "per_request"
    config: dict[str, Any] = Field(default_factory=dict)

    _known_strategy = _known_name("strategy", BUILDERS, "builder strategy")


class EvaluatorSpec(_Spec):
    strategy: str = "session_completed"
    config: dict[str, Any] = Field(default_factory=dict)
    env: EnvVars = Field(default_factory=dict)
    refresh_runtime: StrictBool = False
    # The whole grading's budget, from EVALUATE's start: separate from the agent's.
    timeout_seconds: Seconds = Field(default=1800, gt=0, le=24 * 3600)

    _known_strategy = _known_name("strategy", EVALUATORS, "evaluator strategy")


class TaskRequest(_Spec):
    task_id: str = Field(default_factory=lambda: f"task-{uuid.uuid4().hex[:12]}")
    instruction: Text
    num_samples: StrictInt = Field(default=1, ge=1, le=4096)
    timeout_seconds: Seconds = Field(default=600, gt=0, le=7 * 24 * 3600)
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    agent: AgentSpec
    builder: BuilderSpec = Field(default_factory=BuilderSpec)
    evaluator: EvaluatorSpec = Field(default_factory=EvaluatorSpec)
    callback_url: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    # Polar's: once this many sessions ended usable (completed, a finite reward, something to
    # train on), the task's other sessions are cancelled and the task completes.
    early_stop_min_usable_sessions: StrictInt | None = Field(default=None, ge=1)
    # Polar's 0-100: a higher one enters INIT before lower ones not yet started (a Celery message
    # priority on the INIT queue); running sessions are never preempted.
    dispatch_priority: StrictInt = Field(default=0, ge=0, le=100)

    @model_validator(mode="after")
    def _early_stop_fits(self) -> "TaskRequest":
        if self.early_stop_min_usable_sessions and self.early_stop_min_usable_sessions > self.num_samples:
            raise ValueError(f"early_stop_min_usable_sessions ({self.early_stop_min_usable_sessions}) is more than "
                             f"num_samples ({self.num_samples})")
        return self

    @field_validator("metadata")
    @classmethod
    def _agent_timeout(cls, v: dict[str, Any]) -> dict[str, Any]:
        # Polar's metadata.agent_timeout: the agent's own budget, from RUN's start.
        t = v.get("agent_timeout")
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0):
            raise ValueError("metadata.agent_timeout must be a positive, finite number of seconds")
        return v

    @field_validator("task_id")
    @classmethod
    def _task_id(cls, v: str) -> str:
        return check_task_id(v)

    @field_validator("evaluator", mode="before")
    @classmethod
    def _null_evaluator(cls, v: Any) -> Any:
        return EvaluatorSpec() if v is None else v

    @field_validator("runtime", mode="before")
    @classmethod
    def _null_runtime(cls, v: Any) -> Any:
        return RuntimeSpec() if v is None else v  # Polar's "runtime: null": the default backend

    @field_validator("callback_url")
    @classmethod
    def _callback_url(cls, v: str | None) -> str | None:
        # Templated URLs (the A.3 payload's "{trainer_host}") are accepted; only the scheme
        # is checked here, the POST itself reports an unusable URL.
        if v is not None and not re.fullmatch(r"https?://\S+", v):
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
    dispatch_priority: int = 0
    # What CALLBACK needs of the task, carried by each session so it need not read the task back.
    # (Sessions stored before these existed lack them: ``task_options_known`` is then False.)
    callback_url: str | None = None
    early_stop_min_usable_sessions: int | None = None

    @property
    def task_options_known(self) -> bool:
        return "callback_url" in self.model_fields_set

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
                dispatch_priority=task.dispatch_priority,
                callback_url=task.callback_url,
                early_stop_min_usable_sessions=task.early_stop_min_usable_sessions,
            )
            for i in range(task.num_samples)
        ]

