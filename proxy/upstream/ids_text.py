"""An engine's prompt ids kept as the JSON text it sent, until someone needs them as integers.

A vLLM answer carries the whole prompt's ids (``prompt_token_ids``): on a coding agent's call,
parsing them into Python ints and packing them again for the record was a tenth of the proxy's
own CPU, and a quarter on a 32k-token prompt. The proxy itself only counts them and stores them,
so ``parse_answer`` cuts the array's text out of the answer before parsing the rest and checks it
holds only non-negative integers; the record stores that text (``pipeline.codec.json_doc``) and
its readers get the list back. Anything unexpected (the key twice, not at the top level, not an
array of integers) parses the whole answer as before. Pure: bytes in, values out.
"""

from __future__ import annotations

from typing import Any

import orjson

_DIGITS_AND_COMMAS = b"0123456789,"


class IdsText:
    """Token ids as a JSON array's text (``text``, brackets included), checked to hold only
    non-negative integers; ``len()`` is their number, ``ids()`` parses them (once)."""

    __slots__ = ("text", "count", "_ids")

    def __init__(self, text: bytes, count: int) -> None:
        self.text, self.count = text, count
        self._ids: list[int] | None = None

    def __len__(self) -> int:
        return self.count

    def ids(self) -> list[int]:
        if self._ids is None:
            self._ids = orjson.loads(self.text)
        return self._ids


def parse_answer(data: bytes, key: str | None) -> Any:
    """``data`` parsed as JSON, the top-level array of ``key`` (when given, and when it is one
    of non-negative integers) left as an ``IdsText``. Raises ``orjson.JSONDecodeError`` as
    ``orjson.loads(data)`` would."""
    if key is not None:
        cut = _cut(data, f'"{key}"'.encode())
        if cut is not None:
            rest, ids = cut
            try:
                parsed = orjson.loads(rest)
            except orjson.JSONDecodeError:
                parsed = None
            # The placeholder must be the top level's own value of ``key``: else parse it all.
            if isinstance(parsed, dict) and key in parsed and parsed[key] is None:
                parsed[key] = ids
                return parsed
    return orjson.loads(data)


def _cut(data: bytes, quoted_key: bytes) -> tuple[bytes, IdsText] | None:
    """``data`` with the array after ``quoted_key`` replaced by ``null``, and that array; None
    when the key is not there exactly once or its value is not an array of integers. (A quoted
    key cannot occur inside a JSON string: its quotes would be escaped there.)"""
    at = data.find(quoted_key)
    if at < 0 or data.find(quoted_key, at + len(quoted_key)) >= 0:
        return None
    pos = _skip_space(data, at + len(quoted_key))
    if data[pos:pos + 1] != b":":
        return None
    start = _skip_space(data, pos + 1)
    if data[start:start + 1] != b"[":
        return None
    end = data.find(b"]", start)
    if end < 0:
        return None
    text = data[start:end + 1]
    count = _plain_ids(text)
    if count is None:
        return None
    whole = memoryview(data)
    return b"".join((whole[:start], b"null", whole[end + 1:])), IdsText(text, count)


def _plain_ids(text: bytes) -> int | None:
    """How many ids ``text`` holds when it is ``[1,22,333]``: JSON integers >= 0 (no sign, no
    leading zero) between single commas, without spaces (what engines write); else None (the
    full parse decides). Every check is one pass in C: no id is parsed."""
    if text.translate(None, _DIGITS_AND_COMMAS) != b"[]":
        return None  # a character other than digits and commas inside (or a nested bracket)
    if len(text) == 2:
        return 0
    if text.startswith(b"[,") or text.endswith(b",]") or b",," in text:
        return None
    if text.startswith(b"[0") and text[2:3].isdigit():
        return None
    zero = text.find(b",0")
    while zero >= 0:  # ",0" starts the id 0 or a leading zero: rare, either way
        if text[zero + 2:zero + 3].isdigit():
            return None
        zero = text.find(b",0", zero + 2)
    return text.count(b",") + 1


def _skip_space(data: bytes, pos: int) -> int:
    while data[pos:pos + 1] in (b" ", b"\t", b"\r", b"\n"):
        pos += 1
    return pos
