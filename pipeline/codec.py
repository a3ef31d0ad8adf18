"""msgpack encoding for everything stored in or published through Redis.

Three msgpack extension types carry a completion record's bulky fields (``proxy/capture.py``),
because the proxy writes one per model call on its hot path and packing them as msgpack values
cost it more than the rest of the record: packing Python ints and nested dicts one object at a
time is ~3x slower than copying an array or serialising JSON in one call. ``unpack`` turns
each back into the plain value, so every reader sees lists and dicts as before (records
written before these types existed still decode: they hold the plain values)::

    ext 1  JSON_DOC   a JSON document (compact UTF-8)        -> its value (dict, list, ...)
    ext 2  U32_ARRAY  little-endian uint32 array             -> list[int]
    ext 3  F64_ARRAY  little-endian IEEE-754 float64 array   -> list[float] (bit for bit)
"""

from __future__ import annotations

import json
import sys
from array import array
from functools import partial
from itertools import chain, compress
from typing import Any

import msgpack
import orjson
from pydantic import BaseModel

_INT_RANGE = (-(2**63), 2**64 - 1)
JSON_DOC, U32_ARRAY, F64_ARRAY = 1, 2, 3
_SWAP = sys.byteorder != "little"  # arrays are stored little-endian whatever the host
assert array("I").itemsize == 4 and array("d").itemsize == 8


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
    return msgpack.unpackb(blob, raw=False, strict_map_key=False, ext_hook=_from_ext)


def json_doc(value: Any, raw: bytes | None = None) -> Any:
    """``value`` as a JSON_DOC extension (``raw``: its JSON text, when the caller has it), or
    ``value`` itself when it holds what JSON cannot (integers beyond 64 bits, non-JSON types).
    For parsed JSON and what is built from it. A non-finite float becomes null, as it does in
    every JSON the proxy sends (the engine's request is serialised the same way)."""
    if raw is None:
        try:
            raw = orjson.dumps(value)
        except (orjson.JSONEncodeError, TypeError):
            return value
    return msgpack.ExtType(JSON_DOC, raw)


def u32_array(values: list[int]) -> Any:
    """Token ids as a U32_ARRAY extension; the list itself when an id is outside [0, 2^32)."""
    try:
        packed = array("I", values)
    except (OverflowError, TypeError):
        return values
    if _SWAP:
        packed.byteswap()
    return msgpack.ExtType(U32_ARRAY, packed.tobytes())


def f64_array(values: list[float]) -> Any:
    """Floats as an F64_ARRAY extension (exact: float64 is what Python holds); the list itself
    when an item is not a float or int."""
    try:
        packed = array("d", values)
    except TypeError:
        return values
    if _SWAP:
        packed.byteswap()
    return msgpack.ExtType(F64_ARRAY, packed.tobytes())


def _from_ext(code: int, data: bytes) -> Any:
    if code == JSON_DOC:
        return orjson.loads(data)
    if code in (U32_ARRAY, F64_ARRAY):
        values = array("I" if code == U32_ARRAY else "d")
        values.frombytes(data)
        if _SWAP:
            values.byteswap()
        return values.tolist()
    return msgpack.ExtType(code, data)


def _wide_ints_as_text(value: Any) -> Any:
    if isinstance(value, (bool, msgpack.ExtType)):
        # An extension (a record's packed ids, logprobs, JSON text) holds no Python int: it is
        # kept as it is. (ExtType is a tuple: walked as one, it became a [code, bytes] list and
        # the record no longer decoded.)
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


_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= b <= 0x39 else 0x61 for b in range(256))
_LONG_RUN = b"0" * 19  # 2**63 has 19 digits: shorter integer literals always fit


class InexactInteger(ValueError):
    """An integer literal beyond the 64-bit range (the literal): a parser would round it."""


class DuplicateKey(ValueError):
    """An object names this key twice: parsers keep the last value without a word."""


def _checked_int(literal: str) -> int:
    value = int(literal)
    if not -(2**63) <= value < 2**64:
        raise InexactInteger(literal)
    return value


def json_bytes(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON: ``orjson.dumps``, except that what orjson refuses and
    JSON allows -- an integer beyond 64 bits, e.g. in tool-call arguments a model emitted -- is
    written exactly by the stdlib (a non-finite float becomes null there too, as orjson writes
    it). A value JSON cannot hold still raises TypeError."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(_finite(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def exact_json(raw: bytes | str, parsed: Any) -> Any:
    """``parsed`` (``orjson.loads(raw)``, so ``raw`` is strict JSON), or, when ``raw`` holds an
    integer beyond 64 bits that orjson rounded to a float, ``raw`` parsed again keeping it exact
    (a big integer a harness sends back in a tool call's input must render as the model wrote
    it). Raises ValueError for an integer literal too long for Python (4,300 digits)."""
    if inexact_integer(raw.encode() if isinstance(raw, str) else raw) is None:
        return parsed
    return json.loads(raw)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if value - value == 0 else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def inexact_integer(raw: bytes) -> str | None:
    """An integer literal in the JSON text ``raw`` beyond the 64-bit range (the first), or None.
    orjson reads such a literal as a float, silently rounding it (2**70 comes back as
    1.1805916207174113e+21): a caller's id or seed must be refused, not changed. A scan for 19
    digits in a row finds the candidates (every digit mapped to "0", then one substring search:
    ~4 us for 4.5 kB, ~110 us for 132 kB; a regex took 10x that); a candidate that cannot be a
    number token -- a long number inside a string, as tool output holds, is not preceded by
    ``:``, ``[`` or ``,`` -- is passed over; only then is the text parsed again, exactly
    (~1 ms for 132 kB)."""
    digits = raw.translate(_DIGITS_AS_ZERO)
    at = digits.find(_LONG_RUN)
    while at >= 0:
        if _number_token_at(raw, digits, at):
            break
        end = digits.find(b"a", at)  # past this run of digits
        at = digits.find(_LONG_RUN, end) if end >= 0 else -1
    else:
        return None
    try:
        json.loads(raw, parse_int=_checked_int)
    except InexactInteger as exc:
        return str(exc.args[0])
    except (ValueError, RecursionError):  # not this check's business: the caller's parser accepted the text
        return None
    return None


def _number_token_at(raw: bytes, digits: bytes, at: int) -> bool:
    """Whether the run of digits at ``at`` may be a JSON integer token: what precedes it (a
    minus, whitespace) is a value's start (``:``, ``[``, ``,``, or the text's own start: a bare
    number, as a tool call's arguments may be), and no ``.``/``e`` follows."""
    end = digits.find(b"a", at)
    if end >= 0 and raw[end:end + 1] in (b".", b"e", b"E"):
        return False  # a float literal: orjson's rounding of it is JSON's own
    i = at - 1
    if i >= 0 and raw[i] == 0x2D:  # "-"
        i -= 1
    while i >= 0 and raw[i] in b" \t\r\n":
        i -= 1
    return i < 0 or raw[i] in b":[,"


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return out


def check_unambiguous(raw: bytes) -> None:
    """Raise ``DuplicateKey`` or ``InexactInteger`` for the first place where the JSON text
    ``raw`` (already parsed, and its depth checked) does not say one thing: a payload with two
    ``task_id``s lost one, and a seed of 2**70 came back rounded. One exact parse finds both."""
    try:
        json.loads(raw, object_pairs_hook=_unique_pairs, parse_int=_checked_int)
    except (DuplicateKey, InexactInteger):
        raise
    except (ValueError, RecursionError):  # what orjson accepted and json does not: not this check's to judge
        return

