"""Server-sent-event framing (pure)."""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import orjson


def data_event(payload: Any) -> bytes:
    return b"data: " + _dumps(payload) + b"\n\n"


def named_event(event: str, payload: Any) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + _dumps(payload) + b"\n\n"


def done_event() -> bytes:
    return b"data: [DONE]\n\n"


def data_stream(chunks: Iterable[Any], *, done: bool) -> Iterator[bytes]:
    for chunk in chunks:
        yield data_event(chunk)
    if done:
        yield done_event()


def _dumps(payload: Any) -> bytes:
    return orjson.dumps(payload)
