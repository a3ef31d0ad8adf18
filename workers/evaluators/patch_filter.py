"""What of an agent's patch may be graded, decided on the worker (pure: bytes in, bytes out).

The patch is made by ``git diff`` inside the agent's runtime, so by a ``git`` the agent may have
replaced, and ``patch --fuzz`` (the last apply step) applies any file headers it finds. So the
bytes that come out are checked here, whatever filtering the runtime claims to have done: the
patch is split into its files' sections, each read strictly (the header lines git writes, then
hunks whose line counts are checked, or a binary block), and a section is dropped, with the
reason, when

- it touches a path matching ``NOISE`` or the task's ``exclude_patterns`` (git's glob rules:
  ``*`` stays within a folder, ``**/`` spans folders, a pattern also covers what is under a
  folder it names);
- a path is absolute, has a ``..`` or ``.git`` component, or a control character (a hook in
  ``.git/hooks`` would run in the grading runtime);
- it writes beneath a symlink another section creates;
- it cannot be read as git writes a section (smuggled headers would be applied by ``patch``).

Text before the first section is dropped too (``patch`` would apply hunks found there).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

_HEADER = b"diff --git "
_EXTENDED = (b"old mode ", b"new mode ", b"deleted file mode ", b"new file mode ", b"copy from ", b"copy to ",
             b"rename from ", b"rename to ", b"similarity index ", b"dissimilarity index ", b"index ")
_PATH_LINES = (b"copy from ", b"copy to ", b"rename from ", b"rename to ")
_HUNK = re.compile(rb"^@@ -(\d{1,18})(?:,(\d{1,18}))? \+(\d{1,18})(?:,(\d{1,18}))? @@")  # (longer: no file has them)
_SYMLINK_MODE = b"120000"
_GIT_MODES = (b"100644", b"100755", _SYMLINK_MODE, b"160000")  # a file, an executable, a symlink, a submodule
# A mode as git apply reads one (an octal number up to a space) or patch(1) (on an index line too),
# after any whitespace: both skip tabs, vertical tabs, form feeds as well as spaces before it
_MODE = re.compile(rb"(?:new file mode|new mode|index \S*)\s+([0-7]{1,12})")
_BINARY_LINE = re.compile(rb"(?:literal|delta) \d+|[A-Za-z][0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~]+|")
_PATH_MAX = 4096  # Linux's: git cannot write a longer path from a work tree
_ESCAPES = {"a": "\a", "b": "\b", "t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


class Malformed(ValueError):
    pass


@dataclass
class Patch:
    """What of a patch may be graded: its sections kept, byte for byte (binary hunks included),
    the paths they change (new side, in order), and what was dropped, with why."""

    data: bytes
    files: list[str]
    dropped: list[dict[str, str]] = field(default_factory=list)  # {"path", "reason"}

    @property
    def text(self) -> str:
        return self.data.decode(errors="surrogateescape")

    @property
    def empty(self) -> bool:
        return not self.data.strip()


def filter_patch(data: bytes, exclude: tuple[str, ...] | list[str]) -> Patch:
    preamble, sections = _split(data)
    kept: list[bytes] = []
    files: list[str] = []
    dropped = [{"path": "(before the first file)", "reason": "not part of a file's section"}] if preamble.strip() else []
    read = [_Section.of(lines) for lines in sections]
    # Every symlink the patch makes, wherever its section comes: a file beneath one is refused
    # whether it is written before or after the link.
    symlinks = {s.target for s in read if s.creates_link and s.problem is None}
    for section in read:
        reason = section.problem or _refusal(section.paths, exclude, symlinks)
        if reason:
            dropped.append({"path": _shown(section.target), "reason": _shown(reason)})
            continue
        kept.append(b"".join(section.lines))
        files.append(_shown(section.target))
    return Patch(b"".join(kept), files, dropped)


@dataclass
class _Section:
    lines: list[bytes]
    paths: list[str]
    target: str
    creates_link: bool
    problem: str | None = None

    @classmethod
    def of(cls, lines: list[bytes]) -> "_Section":
        try:
            return cls(lines, *_read_section(lines))
        except Malformed as exc:
            return cls(lines, [], _header_text(lines[0]), False, f"not a section git writes: {exc}")


def _split(data: bytes) -> tuple[bytes, list[list[bytes]]]:
    preamble: list[bytes] = []
    sections: list[list[bytes]] = []
    for line in _lines(data):
        if line.startswith(_HEADER):
            sections.append([line])
        elif sections:
            sections[-1].append(line)
        else:
            preamble.append(line)
    return b"".join(preamble), sections


def _lines(data: bytes) -> Iterator[bytes]:
    """The lines of ``data``, ends kept, cut at b"\n" only, as git and patch(1) cut them
    (``splitlines`` also cuts at a lone CR, which is part of a line to them)."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end + 1
        yield data[start:end]
        start = end


def _read_section(lines: list[bytes]) -> tuple[list[str], str, bool]:
    """(every path the section names, the path it changes, whether it creates a symlink)."""
    header = _header_paths(lines[0])
    paths = list(header or ())
    creates_link = False
    named: dict[bytes, bytes] = {}  # b"from"/b"to" -> the name as a rename's or copy's line writes it
    i = 1
    while i < len(lines) and lines[i].startswith(_EXTENDED):
        line = _bare(lines[i])
        if line.startswith(_PATH_LINES):
            _, side, name = line.split(b" ", 2)
            if side in named:
                raise Malformed("a second rename or copy line for one side")
            named[side] = name
            paths.append(_path(name))
        mode = _MODE.match(line)
        if mode and mode[1] not in _GIT_MODES:  # patch(1) would chmod the file to it (0777, say)
            raise Malformed(f"a file mode git does not write ({mode[1].decode()})")
        if mode and mode[1] == _SYMLINK_MODE:  # (any other mode was refused just above)
            creates_link = True
        i += 1
    if header is None:
        # Two different names: git writes exactly "a/<from> b/<to>" (each quoted as its own line
        # quotes it). patch(1) ignores the names on the rename/copy lines and renames or copies
        # to the header's, so a header naming anything else would be a path nothing here checks.
        if named.keys() != {b"from", b"to"} or _bare(lines[0])[len(_HEADER):] != \
                _side(b"a/", named[b"from"]) + b" " + _side(b"b/", named[b"to"]):
            raise Malformed("a header naming two paths that are not its rename's or copy's")
    rest = lines[i:]
    if rest and rest[0].startswith(b"--- "):
        if len(rest) < 2 or not rest[1].startswith(b"+++ "):
            raise Malformed("a '---' line without its '+++'")
        for line in rest[:2]:
            raw = _bare(line)[4:]
            name = _path(raw)
            if name != "/dev/null":
                paths.append(_strip_side(name))
            # patch(1) ends an unquoted name at its first whitespace unless a tab follows (git
            # writes one after a name with a space): "b/conftest.py x" is conftest.py to it.
            words = raw.split(None, 1)
            if not raw.startswith(b'"') and b"\t" not in raw and (not words or words[0] != raw):
                paths.insert(0, _strip_side(_path(words[0] if words else b"")))
        _check_hunks(rest[2:])
    elif rest and rest[0].startswith(b"Binary files "):
        if len(rest) > 1:
            raise Malformed("lines after 'Binary files ... differ'")
    elif rest and _bare(rest[0]) == b"GIT binary patch":
        # Only what git writes there: "literal N" / "delta N", base85 lines (a length letter,
        # then the alphabet), blank lines. Anything else could be read by patch(1) as a diff.
        if not all(_BINARY_LINE.fullmatch(_bare(line)) for line in rest[1:]):
            raise Malformed("a line in a binary patch that git does not write")
    elif rest:
        raise Malformed(f"unexpected line {_bare(rest[0])[:60]!r}")
    target = paths[-1] if paths else ""
    return paths, target, creates_link


def _check_hunks(lines: list[bytes]) -> None:
    """Hunks whose bodies hold exactly the lines their headers count, and nothing between them."""
    if not lines:
        raise Malformed("file headers without a hunk")
    i = 0
    while i < len(lines):
        m = _HUNK.match(lines[i])
        if not m:
            raise Malformed(f"unexpected line {_bare(lines[i])[:60]!r}")
        old = int(m.group(2)) if m.group(2) is not None else 1
        new = int(m.group(4)) if m.group(4) is not None else 1
        i += 1
        while old > 0 or new > 0:
            if i >= len(lines):
                raise Malformed("a hunk shorter than its header says")
            kind = lines[i][:1]
            if kind == b" ":
                old, new = old - 1, new - 1
            elif kind == b"-":
                old -= 1
            elif kind == b"+":
                new -= 1
            elif kind != b"\\":
                raise Malformed("a hunk line that is not context, removal or addition")
            if old < 0 or new < 0:
                raise Malformed("a hunk longer than its header says")
            i += 1
        while i < len(lines) and lines[i].startswith(b"\\"):  # "\ No newline at end of file"
            i += 1


def _header_paths(line: bytes) -> tuple[str, str] | None:
    rest = _bare(line)[len(_HEADER):]
    if rest.startswith(b'"'):
        first, after = _quoted(rest.decode("utf-8", "surrogateescape"))
        second = after.lstrip(" ")
        b_path = _quoted(second)[0] if second.startswith('"') else second
        return _strip_side(first), _strip_side(b_path)
    text = rest.decode("utf-8", "surrogateescape")
    if text.endswith('"'):
        cut = text.rfind(' "')
        if cut < 0:
            raise Malformed("an unreadable file header")
        return _strip_side(text[:cut]), _strip_side(_quoted(text[cut + 1:])[0])
    # Unquoted a/X b/X: the two halves are the same path (a rename names both in its own lines).
    half = (len(text) - 1) // 2
    if len(text) % 2 == 1 and text[half] == " " and text[2:half] == text[half + 3:]:
        return _strip_side(text[:half]), _strip_side(text[half + 1:])
    return None  # two different unquoted paths: only a rename's or copy's own lines can tell them


def _quoted(text: str) -> tuple[str, str]:
    """A C-quoted string at the start of ``text`` (as git quotes odd paths) and what follows."""
    out: list[str] = []
    raw = bytearray()
    i = 1
    while i < len(text):
        c = text[i]
        if c == '"':
            return _flush(out, raw), text[i + 1:]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt in "01234567":
                digits = text[i + 1:i + 4]
                if len(digits) != 3 or any(d not in "01234567" for d in digits):
                    raise Malformed("a quoted path with a broken octal escape")
                raw.append(int(digits, 8) & 0xFF)
                i += 4
                continue
            out.append(_flush([], raw))
            raw.clear()
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(_flush([], raw))
        raw.clear()
        out.append(c)
        i += 1
    raise Malformed("an unterminated quoted path")


def _flush(out: list[str], raw: bytearray) -> str:
    return "".join(out) + bytes(raw).decode("utf-8", "surrogateescape")


def _path(value: bytes) -> str:
    text = value.decode("utf-8", "surrogateescape")
    if text.startswith('"'):
        return _quoted(text)[0]
    return text.split("\t", 1)[0]  # GNU diff may append a tab and a timestamp


def _side(prefix: bytes, name: bytes) -> bytes:
    """``name`` (as a rename's or copy's line writes it) with ``prefix``, as a header writes it."""
    return b'"' + prefix + name[1:] if name.startswith(b'"') else prefix + name


def _strip_side(path: str) -> str:
    if path.startswith(("a/", "b/")):
        return path[2:]
    raise Malformed(f"a path without its a/ or b/ side: {path[:60]!r}")


def _bare(line: bytes) -> bytes:
    return line.rstrip(b"\r\n")


def _shown(text: str) -> str:
    """``text`` as a result can hold it: a byte of a name that is not UTF-8 (read as a lone
    surrogate) written as ``\\xNN``."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _header_text(line: bytes) -> str:
    return _bare(line)[len(_HEADER):].decode("utf-8", "replace")[:200]


def _refusal(paths: list[str], exclude: tuple[str, ...] | list[str], symlinks: set[str]) -> str | None:
    if not paths:
        return "names no path"
    long = next((p for p in paths if len(p) > _PATH_MAX), None)
    if long is not None:  # no file system holds it; and checking it would cost what it is long squared
        return f"a path longer than any file system holds ({len(long)} characters)"
    for path in dict.fromkeys(paths):
        parts = path.split("/")
        if path != path.strip():
            return f"whitespace at an end of {path[:200]!r}"
        if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
            return f"unsafe path {path[:200]!r}"
        if any(p.lower() == ".git" for p in parts):
            return f"a path inside .git: {path[:200]!r}"
        if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
            return f"a control character in {path[:200]!r}"
        pattern = next((p for p in exclude if glob_matches(p, path)), None)
        if pattern is not None:
            return f"excluded by {pattern!r}"
        link = next((path[:i] for i, ch in enumerate(path) if ch == "/" and path[:i] in symlinks), None)
        if link is not None:
            return f"beneath the symlink {link!r} this patch creates"
    return None


def glob_matches(pattern: str, path: str) -> bool:
    """Whether git's ``:(glob)`` pathspec ``pattern`` covers ``path``: the path itself or a
    folder it lies in, matched as a glob or, as git also tries, literally."""
    pattern = normal_pattern(pattern)
    if pattern == ".":
        return True
    if path == pattern or path.startswith(pattern + "/"):
        return True
    return _glob_regex(pattern).fullmatch(path) is not None


def normal_pattern(pattern: str) -> str:
    """``pattern`` as git reads a pathspec from the repository's top: './', '//' and 'x/..'
    resolved, and no '/' at the end (a folder's pattern covers what is in it anyway)."""
    return posixpath.normpath(pattern) if pattern else pattern


_CLASSES = {"alnum": "a-zA-Z0-9", "alpha": "a-zA-Z", "blank": " \\t", "cntrl": "\\x00-\\x1f\\x7f",
            "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~", "punct": "!-/:-@\\[-`{-~",
            "space": " \\t\\n\\r\\f\\v", "upper": "A-Z", "xdigit": "0-9A-Fa-f"}


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    """The regex of a glob, and of anything beneath what it matches."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i) and (i == 0 or pattern[i - 1] == "/"):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == n:
            out.append("/.*")
            i += 3
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "\\" and i + 1 < n:  # git's glob escapes the next character
            out.append(re.escape(pattern[i + 1]))
            i += 2
        elif pattern[i] == "[" and (bracket := _bracket(pattern, i)) is not None:
            out.append(bracket[0])
            i = bracket[1]
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + "(?:/.*)?", re.S)


def _bracket(pattern: str, start: int) -> tuple[str, int] | None:
    """The regex of the bracket expression at ``start`` and where it ends, as wildmatch reads
    it ('!' or '^' negates, a ']' first is itself, [:class:] names a class), or None when no
    ']' closes it (the '[' is then itself)."""
    i, n = start + 1, len(pattern)
    out = ["["]
    if i < n and pattern[i] in "!^":
        out.append("^")
        i += 1
    first = True
    while i < n and (pattern[i] != "]" or first):
        first = False
        if pattern.startswith("[:", i) and (end := pattern.find(":]", i + 2)) >= 0:
            name = pattern[i + 2:end]
            if name not in _CLASSES:
                raise re.error(f"unknown character class [:{name}:]")
            out.append(_CLASSES[name])
            i = end + 2
        elif pattern[i] == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(pattern[i] if pattern[i] == "-" else re.escape(pattern[i]))
            i += 1
    if i >= n:
        return None
    return "".join(out) + "]", i + 1
