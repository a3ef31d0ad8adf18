"""Copying the worker's files into a session folder on this host (``local``, ``bwrap``,
``apptainer``), never through what the session left there.

An earlier step of the same task (a prepare ``exec``) runs before the upload and may plant links
where the copy will go: ``d/agent.py -> /root/.polar/tokens.json`` had ``shutil.copytree``
overwrite a host file, and a linked folder had it create files anywhere. Here every folder on
the way is opened without following a link (a link in a folder's place is replaced by a real
folder), and every file is created anew (a link or a hard link in its place is removed first,
never written through). Links inside ``src`` are copied as links, as before.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from pipeline.errors import PathRefused

_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def upload_into(src: Path, root: Path, target: Path) -> None:
    """``src`` (a file, or a folder merged into what is there) copied to ``target``, a path in
    the session folder ``root`` (already checked to be inside it)."""
    if not src.exists():
        raise FileNotFoundError(src)
    try:
        parts = list(target.resolve(strict=False).relative_to(root.resolve()).parts)
    except ValueError:  # a link swapped in since the path was checked
        raise PathRefused(f"{target} resolves outside the session directory (a symlink out?)") from None
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the session folder: ours
    try:
        for name in parts[:-1]:
            fd = _enter(fd, name, 0o755)
        if parts and not src.is_dir() and _is_folder(fd, parts[-1]):
            fd = _enter(fd, parts.pop(), 0o755)  # a file onto a folder goes into it, as cp (and copy2) do
            parts.append(src.name)
        if not parts:  # the session folder itself: a folder's content merged into it
            if not src.is_dir():
                raise IsADirectoryError(f"cannot copy the file {src} onto the session folder")
            _fill(src, fd)
        else:
            _place(src, fd, parts[-1], top=True)
    finally:
        os.close(fd)


def _enter(parent: int, name: str, mode: int) -> int:
    """Folder ``name`` in ``parent`` (made if missing, a link in its place replaced), opened
    without following a link; ``parent`` is closed."""
    try:
        try:
            return os.open(name, _FOLDER, dir_fd=parent)
        except FileNotFoundError:
            pass
        except OSError:
            if not _is_link(parent, name):
                raise  # a file of the session's where a folder goes: an error, as copytree's was
            os.unlink(name, dir_fd=parent)
        os.mkdir(name, mode, dir_fd=parent)
        return os.open(name, _FOLDER, dir_fd=parent)  # replaced again meanwhile: refused, not followed
    finally:
        os.close(parent)


def _place(src: Path, parent: int, name: str, *, top: bool = False) -> None:
    if src.is_symlink() and not top:  # (the top is what was asked for: its content, as copy2 took it)
        _clear(parent, name)
        os.symlink(os.readlink(src), name, dir_fd=parent)
    elif src.is_dir():
        fd = _enter(os.dup(parent), name, 0o755)
        try:
            _fill(src, fd)
            os.chmod(fd, stat.S_IMODE(src.stat().st_mode))
        finally:
            os.close(fd)
    else:
        st = src.stat()
        if not stat.S_ISREG(st.st_mode):  # a named pipe would block the worker's open, a device never end
            raise shutil.SpecialFileError(f"{src} is not a regular file (a named pipe, a socket or a device)")
        _clear(parent, name)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     stat.S_IMODE(st.st_mode), dir_fd=parent)
        with open(src, "rb") as source, os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
            out.flush()
            os.chmod(out.fileno(), stat.S_IMODE(st.st_mode))  # (the umask narrowed open's mode)
            os.utime(out.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))


def _fill(src: Path, fd: int) -> None:
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        _place(Path(entry.path), fd, entry.name)


def _clear(parent: int, name: str) -> None:
    """Whatever non-folder is at ``name`` removed: a file is made anew, never written through."""
    try:
        os.unlink(name, dir_fd=parent)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise IsADirectoryError(f"a folder is where the file {name!r} goes") from None


def _is_folder(parent: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _is_link(parent: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False
