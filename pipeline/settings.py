"""One settings object for every process (API, workers, proxy, CLI).

Values come from environment variables with the ``POLAR_`` prefix so that a launcher can hand
the same configuration to every child process. Celery's visibility timeout in particular must
be identical in every process that shares a Redis database (see ``celery_app``), which is why
nothing reads these values from anywhere else.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

ENV_PREFIX = "POLAR_"


def default_home() -> Path:
    return Path(os.environ.get("POLAR_HOME") or Path.home() / ".polar")


@dataclass(frozen=True)
class Settings:
    # Redis. None means "not configured": `polar up` then starts an embedded server.
    redis_url: str | None = None
    # Where the CLI finds a running `polar up` (its URLs) and keeps runtimes/models.
    home: Path = field(default_factory=default_home)

    # Services (URLs as seen by other processes).
    api_url: str = "http://127.0.0.1:8090"
    proxy_url: str = "http://127.0.0.1:8091"
    upstream_url: str = "http://127.0.0.1:8092"
    upstream_engine: str = "vllm"  # the inference server's dialect: "vllm" (SGLang planned)
    # When set, the proxy sends this model name upstream instead of the harness's.
    upstream_model: str | None = None
    upstream_timeout_seconds: float = 3600.0
    policy_version: str | None = None
    # A streamed call whose engine answer takes longer than this starts its stream early and
    # keeps it alive (pings/comments) at this interval; faster calls are streamed in one go.
    stream_keepalive_seconds: float = 5.0
    admin_token: str | None = None  # required as x-polar-admin-token on /admin/* when set
    # Per-request harness noise removed before the engine sees a prompt (see proxy/noise.py).
    noise_rules: str = "anthropic_billing_header"
    noise_patterns: str | None = None

    # Pipeline behaviour.
    ready_capacity: int = 8
    # Kombu re-queues any message not acked within this many seconds, in *every* process on
    # the database (shortest wins), so it must exceed the longest stage by a wide margin.
    visibility_timeout_seconds: int = 4 * 3600
    stage_lease_seconds: int = 30
    reaper_interval_seconds: float = 15.0  # how often workers look for stages whose worker died
    cancel_poll_seconds: float = 0.25
    inflight_drain_seconds: float = 5.0
    # Results can be megabytes each (whole sessions of token ids): bound what Redis keeps.
    result_ttl_seconds: int = 24 * 3600  # terminal SessionResult, for polling
    records_ttl_seconds: int = 3600  # raw completion records after the result is published
    # Approximate trim; entries a trainer has not acked yet can be trimmed, so keep this far
    # above the worst consumer lag (watch XINFO GROUPS lag).
    results_stream_maxlen: int = 10_000
    callback_attempts: int = 4
    max_request_bytes: int = 64 * 1024 * 1024

    @property
    def runtime_root(self) -> Path:
        return self.home / "runtimes"

    @property
    def model_dir(self) -> Path:
        return self.home / "models" / "tiny-qwen2"

    @property
    def up_state_file(self) -> Path:
        return self.home / "up.json"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is None:
                continue
            values[f.name] = _coerce(f.name, f.type, raw)
        if "redis_url" not in values and env.get("REDIS_URL"):
            values["redis_url"] = env["REDIS_URL"]
        settings = cls(**values)
        # A running `polar up` publishes its URLs; explicit env vars still win.
        return settings.with_running_stack(env)

    def with_running_stack(self, env: Mapping[str, str]) -> "Settings":
        state = read_up_state(self.up_state_file)
        if not state:
            return self
        updates = {
            k: v
            for k, v in state.items()
            if k in {"redis_url", "api_url", "proxy_url", "upstream_url"}
            and (ENV_PREFIX + k.upper()) not in env
            and not (k == "redis_url" and (self.redis_url or env.get("REDIS_URL")))
        }
        return replace(self, **updates) if updates else self

    def to_env(self) -> dict[str, str]:
        """Environment that reproduces these settings in a child process."""
        out: dict[str, str] = {}
        for k, v in asdict(self).items():
            if v is None:
                continue
            out[ENV_PREFIX + k.upper()] = str(v)
        return out

    def require_redis(self) -> str:
        if not self.redis_url:
            raise RuntimeError(
                "no Redis configured: set POLAR_REDIS_URL (or REDIS_URL), or start the whole "
                "stack with an embedded Redis using `polar up`"
            )
        return self.redis_url


def _coerce(name: str, annotation: Any, raw: str) -> Any:
    kind = str(annotation)
    try:
        if "Path" in kind:
            return Path(raw)
        if kind.startswith("int"):
            return int(raw)
        if kind.startswith("float"):
            return float(raw)
        if "None" in kind and raw == "":
            return None
        return raw
    except ValueError as exc:
        raise ValueError(f"{ENV_PREFIX}{name.upper()}={raw!r}: {exc}") from None


def read_up_state(path: Path) -> dict[str, Any] | None:
    """The state file a running `polar up` writes; ignored when its process is gone."""
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    pid = state.get("pid")
    if not isinstance(pid, int) or not _alive(pid):
        return None
    return state


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
