"""Which host files a task may copy into its runtime (``prepare`` uploads): only those under the
folders the operator allows (``POLAR_UPLOAD_ROOTS``), after symlinks are resolved -- a payload
must not be able to copy a worker's secrets (``$POLAR_HOME/tokens.json``, another session's
directory, ``/etc``) into a runtime whose agent talks to a model."""

from __future__ import annotations

from pathlib import Path


def upload_problem(src: str, roots: list[Path]) -> str | None:
    """Why ``src`` may not be uploaded, or None when it may."""
    if not roots:
        return "uploads from the worker host are disabled: set POLAR_UPLOAD_ROOTS to the folders tasks may copy from"
    try:
        real = Path(src).resolve(strict=False)
    except (OSError, RuntimeError) as exc:
        return f"cannot resolve it: {exc}"
    if not Path(src).is_absolute():
        return "must be an absolute path on the worker host"
    if not any(real == root or root in real.parents for root in roots):
        return f"is outside POLAR_UPLOAD_ROOTS ({', '.join(map(str, roots))})"
    return None
