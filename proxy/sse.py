"""Server-sent-event framing (pure)."""

from __future__ import annotations

from typing import Any

from pipeline.codec import json_bytes


def data_event(payload: Any) -> bytes:
    return b"data: " + _dumps(payload) + b"\n\n"


def named_event(event: str, payload: Any) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + _dumps(payload) + b"\n\n"


def done_event() -> bytes:
    return b"data: [DONE]\n\n"


def _dumps(payload: Any) -> bytes:
    return json_bytes(payload)
