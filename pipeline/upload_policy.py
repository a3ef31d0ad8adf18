"""Which host files a task may copy into its runtime (``prepare`` uploads): only those under the
folders the operator allows (``POLAR_UPLOAD_ROOTS``), after symlinks are resolved, and never the
service's own state (``excluded``: ``$POLAR_HOME`` with its tokens, sessions and results, and the
``.env`` the settings are read from), even where an allowed folder holds it -- a payload must not
be able to copy a worker's secrets, another session's directory or ``/etc`` into a runtime whose
agent talks to a model (and whose output the API returns)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


def upload_problem(src: str, roots: Sequence[Path], excluded: Sequence[Path] = ()) -> str | None:
    """Why ``src`` may not be uploaded, or None when it may."""
    if not roots:
        return "uploads from the worker host are disabled: set POLAR_UPLOAD_ROOTS to the folders tasks may copy from"
    if "\0" in src:
        return "contains a NUL byte"
    try:
        real = Path(src).resolve(strict=False)
    except (OSError, RuntimeError, ValueError) as exc:
        return f"cannot resolve it: {exc}"
    if not Path(src).is_absolute():
        return "must be an absolute path on the worker host"
    if not any(real == root or root in real.parents for root in roots):
        return f"is outside POLAR_UPLOAD_ROOTS ({', '.join(map(str, roots))})"
    if any(real == own or own in real.parents for own in excluded):
        return "is the service's own state (POLAR_HOME, its .env): never uploaded"
    if any(real in own.parents and own.exists() for own in excluded):  # a folder copied whole takes them along
        return "holds the service's own state (POLAR_HOME or its .env): upload a folder beside it"
    return None
