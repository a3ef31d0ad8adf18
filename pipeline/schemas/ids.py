"""What a task id may be (pure: checked by ``TaskRequest``). A task id ends up in URLs, Redis
keys, folder names (hashed) and in front of people -- the CLI's tables, the viewer, logs."""

from __future__ import annotations

import re
import unicodedata

# Printable, no whitespace, and none of '/', '\', '?', '#' or '%' (a task id is a URL path
# segment: status, cancel, the viewer).
TASK_ID = re.compile(r"^[^\s/\\?#%\x00-\x1f\x7f]{1,200}$")
# Format (bidi overrides, zero-width), control, surrogate, private-use and unassigned characters:
# shown to people, they make one id read as another (U+202E shows "evil<RLO>txt.sh" as "evilhs.txt").
HIDDEN_CATEGORIES = frozenset({"Cf", "Cc", "Cs", "Co", "Cn"})


def check_task_id(v: str) -> str:
    """``v`` if it is a task id, else ValueError saying what is wrong with it."""
    if not TASK_ID.fullmatch(v):
        raise ValueError("task_id must be 1-200 printable characters without spaces, '/', '\\', '?', '#' or '%'")
    if v in (".", ".."):  # a URL path segment of its own: every client resolves it away
        raise ValueError("task_id may not be '.' or '..'")
    hidden = next((c for c in v if unicodedata.category(c) in HIDDEN_CATEGORIES), None)
    if hidden is not None:
        raise ValueError(f"task_id may not hold invisible or direction-changing characters (U+{ord(hidden):04X})")
    return v
