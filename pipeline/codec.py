"""msgpack encoding for everything stored in or published through Redis."""

from __future__ import annotations

from functools import partial
from itertools import chain, compress
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
_IS_DICT = partial(type.__instancecheck__, dict)
_IS_LIST = partial(type.__instancecheck__, list)


def nesting_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether parsed JSON (plain dicts and lists) nests deeper than ``limit``, level by level
    (no recursion to exhaust). Each level's children are gathered and sorted out in C (map over
    dict.values, chain, compress over their types): no Python step per node, and the proxy runs
    this on every large call (a 32k-token request walks in about half its JSON parse)."""
    level = [value] if _IS_CONTAINER(type(value)) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        children = list(chain(chain.from_iterable(map(dict.values, filter(_IS_DICT, level))),
                              chain.from_iterable(filter(_IS_LIST, level))))
        level = list(compress(children, map(_IS_CONTAINER, map(type, children))))
    return False
