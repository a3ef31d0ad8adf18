"""Durable results: every terminal session's result and raw completion records, one file per
session, in Polar's ``save_dir`` layout::

    <results_dir>/task_<task_id>/ses_<session_id>.json      (POLAR_RESULTS_FORMAT=json, default)
    <results_dir>/task_<task_id>/ses_<session_id>.msgpack   (=msgpack)

Redis keeps results for ``POLAR_RESULT_TTL_SECONDS`` and raw records for an hour; these files
are what outlives them (pruned after ``POLAR_RESULTS_KEEP_DAYS``). The CALLBACK stage writes a
session's file before publishing it; the API reads it back once Redis no longer has the session.

A file is one map: ``format`` (``polar-session/1``), ``session_id``, ``task_id``, ``result`` (the
``SessionResult`` as JSON; in msgpack, its result blob: docs/result-blobs.md), ``completions``
(``CompletionRecord``s, arrival order), ``errors`` (failed upstream calls) and
``unreadable_records``. Written to a temporary file in the same folder, fsynced and renamed over
the final name: a reader sees the whole file or none, and writing it again (a redelivered stage)
replaces it, never adds a second one. File I/O only: no Redis here.

Beside the task folders, ``sessions/<session_id>`` names each session's task folder (a few bytes),
so a session whose task Redis has forgotten is found without looking through every task folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any, Iterator

from pipeline.blobs import decode_result, encode_result
from pipeline.codec import pack, unpack
from pipeline.schemas import CompletionRecord, SessionResult, UpstreamErrorRecord

FORMAT = "polar-session/1"
INDEX = "sessions"  # <root>/sessions/<session>: the name of the session's task folder
EXTENSIONS = {"json": ".json", "msgpack": ".msgpack"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_FOLDER = re.compile(r"task_[A-Za-z0-9._-]*(~[0-9a-f]{12})?")  # what task_folder() names
_MAX_NAME = 120  # well under the 255 bytes a file name may have, with room for the prefix and hash


def safe_name(value: str) -> str:
    """``value`` as one path component: never ``.``/``..``, a separator or over-long. Any change
    adds a hash of the original, so two ids that sanitise alike still get distinct names."""
    clean = _UNSAFE.sub("_", value)[:_MAX_NAME]
    if clean == value and clean not in ("", ".", ".."):
        return clean
    return f"{clean}~{hashlib.sha256(value.encode()).hexdigest()[:12]}"


def task_folder(root: Path, task_id: str) -> Path:
    return root / f"task_{safe_name(task_id)}"


def path_for(root: Path, task_id: str, session_id: str, fmt: str = "json") -> Path:
    return task_folder(root, task_id) / f"ses_{safe_name(session_id)}{EXTENSIONS[fmt]}"


def write(root: Path, result: SessionResult, completions: list[CompletionRecord],
          errors: list[UpstreamErrorRecord], unreadable: int = 0, fmt: str = "json") -> Path:
    """Write (or rewrite) the session's file atomically; returns its path."""
    path = path_for(root, result.task_id, result.session_id, fmt)
    body: dict[str, Any] = {"format": FORMAT, "session_id": result.session_id, "task_id": result.task_id,
                            "completions": [c.model_dump(mode="json") for c in completions],
                            "errors": [e.model_dump(mode="json") for e in errors],
                            "unreadable_records": unreadable}
    if fmt == "msgpack":
        data = pack({**body, "result": encode_result(result)})
    else:
        data = json.dumps({**body, "result": result.model_dump(mode="json")}, separators=(",", ":")).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on one filesystem: the old file or the new, never half
    finally:
        tmp.unlink(missing_ok=True)
    _index(root, result.session_id, path.parent.name)
    return path


def _index(root: Path, session_id: str, folder: str) -> None:
    entry = root / INDEX / safe_name(session_id)
    try:
        if entry.is_file() and entry.read_text() == folder:
            return
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = entry.parent / f".{entry.name}.{uuid.uuid4().hex}.tmp"
        tmp.write_text(folder)
        os.replace(tmp, entry)
    except OSError:
        pass  # the scan in find() still finds the file


def find(root: Path, session_id: str, task_id: str | None = None) -> Path | None:
    """The session's file: directly when its task is known, else through the session index, else
    (files written before the index) by looking in every task folder."""
    names = [f"ses_{safe_name(session_id)}{ext}" for ext in EXTENSIONS.values()]
    if task_id:
        folders = [task_folder(root, task_id)]
    else:
        indexed = _indexed_folder(root, session_id)
        folders = [indexed] if indexed else (sorted(root.glob("task_*")) if root.is_dir() else [])
    for folder in folders:
        for name in names:
            if (folder / name).is_file():
                return folder / name
    return None


def _indexed_folder(root: Path, session_id: str) -> Path | None:
    try:
        name = (root / INDEX / safe_name(session_id)).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    # Only ever a task folder name of this root (the index is ours, but a path is still checked).
    if not _FOLDER.fullmatch(name):
        return None
    return root / name


def read(path: Path) -> dict[str, Any]:
    """The file's map, ``result`` as a ``SessionResult`` (either format)."""
    raw = path.read_bytes()
    if path.suffix == EXTENSIONS["msgpack"]:
        data = unpack(raw)
        data["result"] = decode_result(data["result"])
    else:
        data = json.loads(raw)
        data["result"] = SessionResult.model_validate(data["result"])
    return data


def remove_old(root: Path, keep_seconds: float, now: float, *, whole_index: bool = False) -> int:
    """Delete session files older than ``keep_seconds`` with their index entries (and task
    folders left empty, and temporary files a killed writer left); returns how many session
    files went.

    A task folder written to within ``keep_seconds`` is not looked into: its files arrive by
    rename, so its own time is its newest file's, and a walk of every file of every task (8 us a
    file: minutes a pass after months of sessions) touches only what can go. The index of every
    session (``sessions/``) is walked only when ``whole_index`` asks (its entries go with their
    session files; the walk finds the ones a crash left behind)."""
    removed = 0
    if not root.is_dir():
        return 0
    for folder in root.glob("task_*"):
        try:
            if folder.is_symlink() or not folder.is_dir() or now - folder.stat().st_mtime <= keep_seconds:
                continue
        except FileNotFoundError:
            continue
        for name in _unlink_old(folder, keep_seconds, now):
            if not name.startswith("."):
                removed += 1
                _unindex(root, name)
        try:
            folder.rmdir()  # only when empty
        except OSError:
            pass
    index = root / INDEX
    if whole_index and index.is_dir() and not index.is_symlink():
        for _ in _unlink_old(index, keep_seconds, now):
            pass
    return removed


def _unlink_old(folder: Path, keep_seconds: float, now: float) -> Iterator[str]:
    """Delete the files of ``folder`` older than ``keep_seconds``; yields each one's name."""
    for f in folder.iterdir():
        try:
            if f.is_file() and now - f.stat().st_mtime > keep_seconds:
                f.unlink()
                yield f.name
        except FileNotFoundError:  # another worker's reaper pruned it first
            continue


def _unindex(root: Path, file_name: str) -> None:
    """The index entry of the session file ``file_name`` (``ses_<name><ext>``) removed."""
    stem = file_name.removeprefix("ses_")
    for ext in EXTENSIONS.values():
        if stem.endswith(ext):
            try:
                (root / INDEX / stem[: -len(ext)]).unlink()
            except (FileNotFoundError, IsADirectoryError):
                pass
            return


__all__ = ["EXTENSIONS", "FORMAT", "find", "path_for", "read", "remove_old", "safe_name", "task_folder", "write"]
