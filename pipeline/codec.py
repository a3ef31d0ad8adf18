"""msgpack encoding for everything stored in or published through Redis."""

from __future__ import annotations

from itertools import compress
from typing import Any

import msgpack
from pydantic import BaseModel

_INT_RANGE = (-(2**63), 2**64 - 1)


def pack(obj: Any) -> bytes:
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json")
    try:
        return msgpack.packb(obj, use_bin_type=True)
    except OverflowError:
        # JSON allows integers msgpack cannot hold (a client's request is stored verbatim):
        # keep those as their decimal text rather than lose the record.
        return msgpack.packb(_wide_ints_as_text(obj), use_bin_type=True)


def unpack(blob: bytes | bytearray | memoryview) -> Any:
    return msgpack.unpackb(blob, raw=False, strict_map_key=False)


def _wide_ints_as_text(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
        return str(value)
    if isinstance(value, dict):
        return {k: _wide_ints_as_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_wide_ints_as_text(v) for v in value]
    return value


def text(value: bytes | str) -> str:
    """A Redis reply as text (replies are bytes unless a client decodes them itself)."""
    return value.decode() if isinstance(value, bytes) else value


def blob(value: bytes | str) -> bytes:
    """A Redis reply as bytes."""
    return value.encode() if isinstance(value, str) else value


_IS_CONTAINER = frozenset({dict, list}).__contains__


def nesting_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether parsed JSON nests deeper than ``limit`` (iterative: no recursion to exhaust).
    Level by level, picking each container's child containers in C (``compress`` over their
    types): one Python step per container, none per scalar (the proxy runs this on every call)."""
    level = [value] if _IS_CONTAINER(type(value)) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below: list[Any] = []
        for node in level:
            children = node.values() if type(node) is dict else node
            below += compress(children, map(_IS_CONTAINER, map(type, children)))
        level = below
    return False
