"""The rollout API's one error type: rendered as ``{"error": {"type", "message", "fields"?}}``
with its HTTP status by the app's error handler."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(self, status: int, type_: str, message: str, fields: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.status, self.type, self.message, self.fields = status, type_, message, fields
