"""The secrets of a stack's control surfaces, generated once into ``$POLAR_HOME/tokens.json``
(mode 0600) and reused by every later ``polar up`` on that home, so clients keep working.

``with_tokens`` fills in whichever secret the settings lack; ``client_tokens`` gives the CLI's
client commands what they need. Secrets are never printed or logged: ``polar up`` prints the
file's path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pipeline.credentials import new_token
from pipeline.settings import Settings

SECRETS = ("api_token", "admin_token", "flower_basic_auth", "callback_secret")


def tokens_file(settings: Settings) -> Path:
    return settings.home / "tokens.json"


def _load(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if k in SECRETS and isinstance(v, str) and v} if isinstance(data, dict) else {}


def with_tokens(settings: Settings) -> Settings:
    """``settings`` with every control secret set: the configured one, else the home's stored
    one, else a new one (stored for the next start)."""
    path = tokens_file(settings)
    stored = _load(path)
    changed = False
    values: dict[str, Any] = {}
    for name in SECRETS:
        if settings.secret(name):
            continue
        if name not in stored:
            stored[name] = f"polar:{new_token()}" if name == "flower_basic_auth" else new_token()
            changed = True
        values[name] = stored[name]
    if changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(stored, f, indent=2)
    return settings.replace(**values) if values else settings


def client_tokens(settings: Settings) -> dict[str, str]:
    """The home's stored secrets the environment does not set (for the CLI's client commands)."""
    return {k: v for k, v in _load(tokens_file(settings)).items() if not settings.secret(k)}
