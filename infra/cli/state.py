"""What a running ``polar up`` tells the client commands on the same machine.

``polar up`` writes its URLs to ``$POLAR_HOME/up.json``; ``submit``, ``status``, ``cancel``,
``verify`` and ``flower`` read it so they find the stack without any setting (its Redis password
comes from the home's ``tokens.json``, not from this file). Services
(``worker``, ``proxy``, ``api``, ``model serve``) never read it: a production process takes its
configuration from its environment only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from infra.tokens import client_tokens, stored_redis_password, with_password
from pipeline.settings import ENV_PREFIX, Settings

STACK_KEYS = ("redis_url", "api_url", "proxy_url", "upstream_url")


def up_state_file(settings: Settings) -> Path:
    return settings.home / "up.json"


def client_settings() -> Settings:
    """The environment's settings, completed by a running ``polar up`` (its URLs) and by the
    home's stored secrets (explicit variables win)."""
    settings = Settings.from_env()
    updates: dict[str, Any] = dict(client_tokens(settings))
    state = read_up_state(up_state_file(settings))
    if state:
        updates.update({k: state[k] for k in STACK_KEYS
                        if state.get(k) and (ENV_PREFIX + k.upper()) not in os.environ
                        and not (k == "redis_url" and (settings.redis_url or os.environ.get("REDIS_URL")))})
        password = stored_redis_password(settings)
        if isinstance(updates.get("redis_url"), str) and password:  # up.json names no secret
            updates["redis_url"] = with_password(updates["redis_url"], password)
    return settings.replace(**updates) if updates else settings


def write_up_state(settings: Settings, state: dict[str, Any]) -> None:
    path = up_state_file(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2))


def read_up_state(path: Path) -> dict[str, Any] | None:
    """The state file a running ``polar up`` writes; ignored when its process is gone."""
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    pid = state.get("pid") if isinstance(state, dict) else None
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
