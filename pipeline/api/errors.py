"""The rollout API's one error type: rendered as ``{"error": {"type", "message", "fields"?}}``
with its HTTP status by the app's error handler."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(self, status: int, type_: str, message: str, fields: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.status, self.type, self.message, self.fields = status, type_, message, fields


def count_arg(args: Any, name: str, default: int, most: int) -> int:
    """A query parameter that counts items: absent is ``default``, a whole number is held to
    1..``most``, anything else is a 400 (``str.isdigit`` alone passes '²', which ``int`` refuses)."""
    raw = args.get(name)
    if raw is None or raw == "":
        return default
    if not (raw.isascii() and raw.isdigit()):
        raise ApiError(400, "invalid_request", f"'{name}' must be a whole number (1 to {most})")
    return min(max(int(raw), 1), most)
