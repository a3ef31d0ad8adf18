"""One typed settings object for every process (API, workers, proxy, CLI).

Values come from ``POLAR_*`` environment variables (and a ``.env`` file in the working
directory), typed by pydantic-settings: ``POLAR_READY_CAPACITY=abc`` is an error naming the
variable, and a ``POLAR_*`` variable that is not a setting (a typo such as
``POLAR_READY_CAPACTY``) is refused by name instead of silently ignored. A launcher hands the
same configuration to every child through ``to_env``. Celery's visibility timeout in
particular must be identical in every process sharing a Redis database (``celery_app``).

Nothing here reads the state of a running ``polar up``: only the CLI does that (``infra/cli``),
so a production worker can never pick up a developer's stack.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, Literal, Mapping

from dotenv import dotenv_values
from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipeline.errors import ConfigError

ENV_PREFIX = "POLAR_"

# POLAR_* names that are not settings: what a runtime injects into an agent's environment, and
# the reference model server's own launch variables.
NOT_SETTINGS = frozenset({"POLAR_SESSION_ID", "POLAR_TASK_ID", "POLAR_INSTRUCTION", "POLAR_MODEL",
                          "POLAR_SESSION_DIR", "POLAR_INSTRUCTION_FILE"})
NOT_SETTINGS_PREFIXES = ("POLAR_REFSERVER_", "POLAR_TEST_")  # the model server's own; the test suite's


def default_home() -> Path:
    return Path.home() / ".polar"


class Settings(BaseSettings):
    # An empty variable means "not set" (the default), as in the shell idiom VAR= command.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_file=".env", extra="ignore", frozen=True,
                                      env_ignore_empty=True, populate_by_name=True)

    # Redis. None means "not configured": `polar up` then starts an embedded server.
    redis_url: str | None = Field(default=None, validation_alias=AliasChoices("POLAR_REDIS_URL", "REDIS_URL"))
    # Runtimes, models and logs live here.
    home: Path = Field(default_factory=default_home)

    # Services (URLs as seen by other processes).
    api_url: str = "http://127.0.0.1:8090"
    proxy_url: str = "http://127.0.0.1:8091"
    upstream_url: str = "http://127.0.0.1:8092"  # comma-separated: several engine endpoints
    upstream_engine: str = "vllm"  # the inference server's dialect (proxy.upstream registry)
    # How token-in calls (agent.token_in) reach the engine (docs/token-in.md): chat_tokens (vLLM
    # with infra/vllm_ext, the reference server), completions (stock vLLM), sglang_generate or
    # chat_input_ids (SGLang). Unset: chat_tokens for vllm, sglang_generate for sglang.
    upstream_token_in: Literal["chat_tokens", "completions", "sglang_generate", "chat_input_ids"] | None = None
    # When set, the proxy sends this model name upstream instead of the harness's.
    upstream_model: str | None = None
    upstream_timeout_seconds: float = Field(default=3600.0, gt=0)
    # The engine's context length (prompt + output tokens). Unset: what the engine's /v1/models
    # card says (max_model_len, on vLLM and SGLang), learnt when a call first overflows it.
    upstream_context_length: int | None = Field(default=None, gt=0)
    # A call whose prompt + requested output exceeds the context: "clamp" lowers its output limit
    # to fit, "refuse" answers the API's own context-overflow error (proxy/context_limits.py).
    context_overflow: Literal["clamp", "refuse"] = "clamp"
    policy_version: str | None = None
    # A streamed call whose engine answer takes longer than this starts its stream early and
    # keeps it alive (pings/comments) at this interval; faster calls are streamed in one go.
    stream_keepalive_seconds: float = Field(default=5.0, gt=0)
    # A client closing its connection while the engine samples its call aborts the engine call
    # (proxy/client_watch.py). Off: kept for clients that half-close after sending (shutdown of
    # their write side looks the same as leaving; no harness does it).
    abort_on_client_close: bool = True
    # The proxy's and the API's HTTP servers (infra/gevent_worker.py): a request's line and headers
    # must all arrive within http_head_seconds of its first byte (a 408 otherwise), and a
    # connection is closed once a read or write makes no progress for http_idle_seconds (an idle
    # kept-alive connection too). A client trickling its headers cannot hold a server for good.
    http_head_seconds: float = Field(default=20.0, gt=0)
    http_idle_seconds: float = Field(default=75.0, gt=0)
    # A `polar up` service's log beyond this is rotated (infra/log_rotation.py; 3 older copies kept).
    log_max_mb: int = Field(default=64, gt=0)
    # Control-surface secrets (`polar up` generates them into $POLAR_HOME/tokens.json). Unset,
    # a surface is open, and a service refuses to bind beyond loopback (infra/cli).
    api_token: SecretStr | None = None  # Authorization: Bearer <token> on the rollout API
    admin_token: SecretStr | None = None  # x-polar-admin-token on the proxy's /admin/*
    flower_basic_auth: SecretStr | None = None  # "user:password" for Flower
    callback_secret: SecretStr | None = None  # HMAC key of callback signatures
    # Hosts a task's callback_url may name (comma-separated; empty: any host but this service's
    # own API, proxy and Flower).
    callback_allowed_hosts: str = ""
    # Where Flower listens, when one runs beside this service: callbacks may not point there either.
    flower_url: str | None = None
    # The proxy's GET /metrics and the tallies behind it (proxy/metrics.py); off: neither.
    proxy_metrics: bool = True
    # Per-request harness noise removed before the engine sees a prompt (see proxy/noise.py).
    noise_rules: str = "anthropic_billing_header"
    noise_patterns: str | None = None

    # Runtimes.
    default_runtime_backend: str = "local"  # for tasks whose runtime names no backend
    # The backends a task may run on (comma-separated; unset: all). `local` runs the agent, and
    # whatever a task's commands say, on the worker host as its user: whoever holds the API token
    # then runs code there. A stack taking tasks from others sets e.g. "docker,bwrap".
    allowed_runtime_backends: str | None = None
    # The networks a session may get (comma-separated: "none" always; "host" is the worker's own,
    # its loopback included; others are docker network names). Unset: any network by name, not a
    # mode like "container:<name>" or "ns:<path>", which joins another container's -- another session's.
    allowed_runtime_networks: str | None = None
    docker_host: str | None = None  # the docker (or podman) API socket; unset: DOCKER_HOST / the default
    # How long a control call to the container engine (a command's start, a kill, an inspect, the
    # teardown's remove) waits for its answer. A hung engine otherwise held each for the client's
    # 120 s: a session far past its budget, its run slot held. Copies of files and the agent's own
    # output stream keep the long wait.
    docker_call_timeout_seconds: float = Field(default=30, gt=0)
    # The proxy also listens here (when set); runtimes without a network reach it through it.
    proxy_socket: Path | None = None
    # Host folders a task may upload from (prepare actions' src); nothing else on a worker host
    # can be copied into a runtime. Comma-separated; `polar up` adds its working directory.
    upload_roots: str = ""
    # The most one upload may copy (a folder counted whole, links not followed): a payload naming a
    # big folder would otherwise copy it once per session, num_samples times, onto the disk.
    upload_max_mb: int = Field(default=1024, ge=1)
    apptainer_bin: str | None = None  # the apptainer CLI for the apptainer backend (default: on PATH)
    tools_dir: Path | None = None  # harness tools mounted read-only at /polar/tools (default $POLAR_HOME/tools)
    # What a session leaves for humans (agent output, step logs, harness transcripts), kept
    # after teardown in $POLAR_HOME/artifacts/<task>/<session>/ (workers/stages/artifacts.py).
    keep_artifacts: bool = True
    artifacts_max_mb: int = Field(default=200, ge=1)
    artifacts_keep_days: float = Field(default=7.0, gt=0)

    # Pipeline behaviour.
    ready_capacity: int = Field(default=8, ge=1)
    # Kombu re-queues any message not acked within this many seconds, in *every* process on
    # the database (shortest wins), so it must exceed the longest stage by a wide margin.
    visibility_timeout_seconds: int = Field(default=4 * 3600, gt=0)
    stage_lease_seconds: float = Field(default=30, gt=0)
    reaper_interval_seconds: float = Field(default=15.0, gt=0)  # how often workers look for lost stages
    # How long a lease stays expired before the reaper takes it (None: half the lease, at least
    # 6 s -- longer than live holders take to renew after a Redis outage; stores/leases.py).
    lease_take_grace_seconds: float | None = Field(default=None, ge=0)
    cancel_poll_seconds: float = Field(default=0.25, gt=0)
    # A running agent is stopped (ERROR, saying why) once the disk holding POLAR_HOME or the
    # session's files has less free: one agent writing without end would otherwise fill it, and
    # Redis (its append-only file), the logs and every other session with it. 0: never.
    min_free_disk_mb: int = Field(default=512, ge=0)
    # The same for files: an agent making small files without end runs the filesystem out of
    # inodes long before its space, and then nothing on it can make a file (Redis's rewrite of its
    # append-only file, a new session's folder, a log's rotation). 0: never; filesystems without a
    # fixed inode count (btrfs) are never short of them.
    min_free_inodes: int = Field(default=20_000, ge=0)
    inflight_drain_seconds: float = Field(default=5.0, ge=0)
    # A proxy renews the lease of each model call it holds every third of this; a killed proxy's
    # calls stop counting as in flight (pause, POSTRUN) after at most this long.
    call_lease_seconds: float = Field(default=15.0, gt=0)
    # A model call arriving while the proxy cannot reach Redis (a restart, a failover) waits this
    # long for it before its 503: an SDK's own retries give up within seconds.
    proxy_redis_wait_seconds: float = Field(default=30.0, ge=0)
    # A model call finding no engine endpoint that accepts connections (an engine restarting) waits
    # this long for one before its 502: nothing was sent, so trying again samples nothing twice, and
    # some CLIs give up on a few quick 502s (codex after 5), ending the session.
    proxy_engine_wait_seconds: float = Field(default=30.0, ge=0)
    # Results can be megabytes each (whole sessions of token ids): bound what Redis keeps.
    result_ttl_seconds: int = Field(default=24 * 3600, gt=0)  # terminal SessionResult, for polling
    records_ttl_seconds: int = Field(default=3600, gt=0)  # raw completion records after publishing
    # The stream's cap. A trim never drops what a consumer group has not read or acked: it keeps
    # it past the cap and reports the backlog (pipeline status, an error log).
    results_stream_maxlen: int = Field(default=10_000, gt=0)
    # A results-stream entry delivered this often without an ack goes to the dead-letter stream.
    results_max_deliveries: int = Field(default=5, ge=1)
    # Every terminal session's result and raw completion records, one file per session in
    # <results_dir>/task_<task_id>/ses_<session_id>.<json|msgpack> (Polar's save_dir; default
    # $POLAR_HOME/results). The API serves them once Redis no longer holds them, so API and
    # workers must see the same folder. Pruned after results_keep_days.
    results_dir: Path | None = None
    results_format: Literal["json", "msgpack"] = "json"
    # How result and trajectory blobs are laid out (docs/result-blobs.md): "compact" (version 3,
    # ~4.4 bytes a token on a merged trace, a few ms a million tokens to expand) or "aligned"
    # (version 2, ~9 bytes a response token, every array a view of the blob).
    blob_layout: Literal["compact", "aligned"] = "compact"
    results_keep_days: float = Field(default=30.0, gt=0)
    callback_attempts: int = Field(default=4, ge=1)
    # Celery task events from the start (what Flower shows: received, started, finished per task).
    # Off by default: they cost ~10 ms of CPU per session across the workers (bench/orchestration_bench.py
    # --events), and a running Flower turns them on in every worker it sees anyway.
    task_events: bool = False
    max_request_bytes: int = Field(default=64 * 1024 * 1024, gt=0)  # a model call to the proxy
    # Submissions: the body, one instruction, and the bytes a task stores in all (each session
    # keeps its own copy of the spec: spec x num_samples).
    max_submit_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    max_instruction_bytes: int = Field(default=1024 * 1024, gt=0)
    max_task_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    max_json_depth: int = Field(default=64, gt=0)
    # The trajectory viewer (/viewer on the API) asks the engine (the first upstream_url) for the
    # text of tokens the records carry as ids only (POST /detokenize); off: it shows ids.
    viewer_detokenize: bool = True
    # Modules (comma-separated) whose classes a task may name as plug-ins by import path
    # ("my_lab.graders:Grader"); nothing else can be imported from a payload.
    plugin_modules: str = ""

    @property
    def plugin_module_list(self) -> list[str]:
        return [m.strip() for m in self.plugin_modules.split(",") if m.strip()]

    @property
    def runtime_root(self) -> Path:
        return self.home / "runtimes"

    @property
    def upload_root_list(self) -> list[Path]:
        return [Path(p.strip()).resolve() for p in self.upload_roots.split(",") if p.strip()]

    @property
    def upload_excluded(self) -> list[Path]:
        """What no upload may copy, whatever the roots: this service's home and its ``.env``."""
        return [self.home.resolve(), Path(".env").resolve()]

    @property
    def tools_path(self) -> Path:
        return self.tools_dir or self.home / "tools"

    @property
    def results_path(self) -> Path:
        return self.results_dir or self.home / "results"

    @property
    def model_dir(self) -> Path:
        return self.home / "models" / "tiny-qwen2"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        """Settings from the environment (default ``os.environ``) and ``.env``; every problem is a
        ``ConfigError`` that names the variable."""
        env = dict(os.environ if environ is None else environ)
        if environ is None:
            env.update({k: v or "" for k, v in dotenv_values(".env").items()})
        check_variables(env)
        try:
            if environ is None:
                return cls()
            return cls.model_validate(_from_mapping(env))
        except ValidationError as exc:
            problems = "; ".join(f"{_variable(e['loc'])}: {e['msg']}" for e in exc.errors())
            raise ConfigError(f"invalid settings: {problems}") from None

    def replace(self, **changes: Any) -> "Settings":
        """A copy with ``changes`` applied (validated like any other value)."""
        return type(self).model_validate({**self.model_dump(), **changes})

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return url

    def to_env(self) -> dict[str, str]:
        """Environment that reproduces these settings in a child process (secrets included: an
        environment is not a log)."""
        out = {}
        for k, v in self.model_dump().items():
            if isinstance(v, SecretStr):
                v = v.get_secret_value()
            if v is not None:
                out[ENV_PREFIX + k.upper()] = str(v)
        return out

    def secret(self, name: str) -> str | None:
        """The value of a secret setting (``api_token``, ...), or None when unset."""
        value = getattr(self, name)
        return value.get_secret_value() if isinstance(value, SecretStr) and value.get_secret_value() else None

    def require_redis(self) -> str:
        if not self.redis_url:
            raise ConfigError("no Redis configured: set POLAR_REDIS_URL (or REDIS_URL), or start the whole "
                              "stack with an embedded Redis using `polar up`")
        return self.redis_url


def setting_variables() -> set[str]:
    return {ENV_PREFIX + name.upper() for name in Settings.model_fields}


def check_variables(env: Mapping[str, str]) -> None:
    """Refuse ``POLAR_*`` variables that are not settings (a misspelling would otherwise be
    silently ignored), with the closest setting suggested."""
    known = setting_variables()
    unknown = sorted(name for name in env if name.startswith(ENV_PREFIX) and name not in known
                     and name not in NOT_SETTINGS and not name.startswith(NOT_SETTINGS_PREFIXES))
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hints.append(f"{name} (did you mean {close[0]}?)" if close else name)
        raise ConfigError(f"unknown setting variable(s): {', '.join(hints)}")


def _from_mapping(env: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for name in Settings.model_fields:
        value = env.get(ENV_PREFIX + name.upper())
        if value:
            out[name] = value
    if "redis_url" not in out and env.get("REDIS_URL"):
        out["redis_url"] = env["REDIS_URL"]
    return out


def _variable(loc: tuple[Any, ...]) -> str:
    if not loc:
        return "settings"
    name = str(loc[0]).upper()
    if name in ("REDIS_URL", "POLAR_REDIS_URL"):  # (the one setting with an alias)
        return "POLAR_REDIS_URL (or REDIS_URL)"
    return ENV_PREFIX + name
