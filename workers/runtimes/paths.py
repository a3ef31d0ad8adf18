"""Paths inside a runtime, resolved and checked (pure but for resolving symlinks on the host).

Every backend takes the same runtime paths: ``/polar/session/...`` is the session directory,
a relative path is against the workdir, and nothing may climb out with ``..``. On the host
(``local``, ``bwrap``) the session directory *is* the session's filesystem: an absolute path
elsewhere, or a symlink that resolves outside it, is refused. In a container the container's
filesystem is the session's, so absolute paths there are fine (``/testbed`` in SWE-bench images).
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from pipeline.errors import PathRefused
from pipeline.schemas.task import SESSION_MOUNT, runtime_path_problem


def _checked(path: str) -> str:
    why = runtime_path_problem(path)
    if why:
        raise PathRefused(f"path {path!r} {why}")
    return path


def host_path(root: Path, workdir: Path, path: str) -> Path:
    """Where a runtime path is on the host, for a runtime whose filesystem is ``root``."""
    _checked(path)
    if path == SESSION_MOUNT or path.startswith(SESSION_MOUNT + "/"):
        candidate = root / path[len(SESSION_MOUNT):].lstrip("/")
    elif path.startswith("/"):
        raise PathRefused(f"path {path!r} is outside the session: absolute paths are under {SESSION_MOUNT}")
    else:
        candidate = workdir / path
    real, boundary = candidate.resolve(strict=False), root.resolve(strict=False)
    if real != boundary and boundary not in real.parents:
        raise PathRefused(f"path {path!r} resolves outside the session directory (a symlink out?)")
    return candidate


def container_path(workdir: str, path: str) -> str:
    """A runtime path inside a container: relative ones against the workdir."""
    _checked(path)
    return posixpath.normpath(path if path.startswith("/") else posixpath.join(workdir, path))
