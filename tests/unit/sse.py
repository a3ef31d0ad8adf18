"""A strict SSE parser for tests: (event name or None, data) per event, comments dropped."""

from __future__ import annotations


def parse_sse(raw: bytes) -> list[tuple[str | None, str]]:
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
            else:
                raise AssertionError(f"not an SSE line: {line!r}")
        if data:
            events.append((name, "\n".join(data)))
    return events
