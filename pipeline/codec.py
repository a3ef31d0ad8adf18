"""msgpack encoding for everything stored in or published through Redis."""

from __future__ import annotations

from typing import Any

import msgpack
from pydantic import BaseModel


def pack(obj: Any) -> bytes:
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json")
    return msgpack.packb(obj, use_bin_type=True)


def unpack(blob: bytes) -> Any:
    return msgpack.unpackb(blob, raw=False, strict_map_key=False)
