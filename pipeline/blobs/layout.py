"""The byte layout of version-2 and version-3 blobs: writing them, finding their parts, and
turning them back into the plain (version-1 shaped) data the pydantic schemas validate. Knows no
schema class, so the schemas themselves can call it (``docs/result-blobs.md`` is the
specification).

Both are one msgpack map whose first two entries are fixed::

    "blob_version": 2 or 3
    "arrays": <bin32>          every packed array of every trace
    ...                        the other fields, as in version 1, except each trace's token
                               fields, which are references into "arrays"

The fixed start is what lets a reader take numpy views of the arrays without parsing, or
copying, the bin: its position is known after reading three keys. Version 2 ("aligned") keeps
every array a plain little-endian array, each read in place; version 3 ("compact") may also use
the smaller encodings of ``compact.py`` (3-byte ids, run-length masks, logprobs of sampled tokens
only), which cost a copy to expand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from pipeline.blobs import compact
from pipeline.codec import pack, unpack
from pipeline.errors import BlobFormatError

# What each layout writes; a reader takes both (and version 1, which has no blob_version).
LAYOUTS = {"compact": 3, "aligned": 2}
BLOB_VERSION = LAYOUTS["compact"]  # the newest
VERSION_KEY = "blob_version"
ARRAYS_KEY = "arrays"
# The trace fields that travel packed; every other trace field is stored as in version 1.
PACKED_FIELDS = ("prompt_ids", "response_ids", "loss_mask", "response_logprobs")
TOKENS_FIELD = "response_tokens"  # per-token strings, only when an engine returned some
NESTED = "msgpack"  # the dtype of a reference whose bytes are one msgpack value, not an array
PLAIN_DTYPES = frozenset({"<i4", "<i8", "<u8", "|u1", "<f4", "<f8"})
DTYPES = PLAIN_DTYPES | {NESTED, compact.U2, compact.U3, compact.RUNS, compact.BITS}
ALIGN = 8
# Arrays read in place start 8-aligned (numpy and torch want aligned memory); what is only ever
# copied out needs no more than its element's alignment.
_ALIGN_OF = {compact.U3: 1, compact.BITS: 1, compact.U2: 2, compact.RUNS: 4}

_VERSION_KEY_PACKED = pack(VERSION_KEY)
_ARRAYS_KEY_PACKED = pack(ARRAYS_KEY)
_BIN32 = 0xC6
_INT32 = np.iinfo(np.int32)


# --- choosing each array's representation: the smallest that gives back exactly what went in ---

def pack_ints(values: list[int]) -> tuple[str, bytes]:
    """Token ids as little-endian int32; int64 or uint64 when an id needs it; beyond 64 bits
    (no tokenizer has such ids, but the schema allows them) a nested msgpack list, as version 1
    kept them."""
    try:
        wide = np.array(values, dtype=np.int64)
    except OverflowError:
        # (numpy 1.x would wrap a negative id into uint64 instead of refusing it)
        if min(values) >= 0 and max(values) < 2**64:
            return "<u8", np.array(values, dtype=np.uint64).astype("<u8").tobytes()
        return NESTED, pack(values)
    if not wide.size or (wide.min() >= _INT32.min and wide.max() <= _INT32.max):
        return "<i4", wide.astype("<i4").tobytes()
    return "<i8", wide.astype("<i8").tobytes()


def pack_floats(values: list[float], *, flags: bool = False) -> tuple[str, bytes]:
    """float32 when every value survives the round trip through it bit for bit (engines sample
    in float32, so logprobs do), else float64. ``flags``: a loss mask of 0 and 1 only is one byte
    per token."""
    wide = np.array(values, dtype=np.float64)
    if flags and bool(np.all((wide == 0.0) | (wide == 1.0))) and not np.signbit(wide).any():
        return "|u1", wide.astype(np.uint8).tobytes()
    with np.errstate(over="ignore"):  # an overflow to inf just fails the exactness test below
        narrow = wide.astype("<f4")
    # Compared as bits: a NaN whose payload float32 cannot hold must not come back another NaN.
    if np.array_equal(narrow.astype(np.float64).view(np.uint64), wide.view(np.uint64)):
        return "<f4", narrow.tobytes()
    return "<f8", wide.astype("<f8").tobytes()


class ArrayWriter:
    """Builds the arrays bin. ``lead`` is the bin's offset in the blob, so that every array
    starts on an 8-byte boundary of the blob (numpy and torch want aligned memory)."""

    def __init__(self, lead: int) -> None:
        self.buffer = bytearray()
        self._lead = lead
        self._tail: tuple[dict[str, Any], bytes] | None = None  # the last array, when nothing follows it

    def add(self, dtype: str, data: bytes, *, count: int | None = None,
            reuse_at: int | None = None) -> dict[str, Any]:
        """``count``: elements, where the bytes do not tell (a bit mask); ``reuse_at``: where the
        same bytes may already be (then they are not written again)."""
        if not data:
            return _ref(dtype, 0, data, count)
        if reuse_at is not None and self._holds(reuse_at, data):
            return _ref(dtype, reuse_at, data, count)
        self.buffer += b"\0" * (-(self._lead + len(self.buffer)) % _ALIGN_OF.get(dtype, ALIGN))
        ref = _ref(dtype, len(self.buffer), data, count)
        self.buffer += data
        self._tail = (ref, data)
        return ref

    def add_extending(self, dtype: str, data: bytes) -> dict[str, Any]:
        """Like ``add``; but when ``data`` starts with the last array written, only the rest is
        written, right after it, and the reference spans both."""
        tail = self._tail
        if not data or tail is None or tail[0]["dtype"] != dtype or not data.startswith(tail[1]):
            return self.add(dtype, data)
        ref = _ref(dtype, tail[0]["offset"], data)
        self.buffer += data[len(tail[1]):]
        self._tail = (ref, data)
        return ref

    def _holds(self, offset: int, data: bytes) -> bool:
        with memoryview(self.buffer) as view:
            return view[offset:offset + len(data)] == data


def _ref(dtype: str, offset: int, data: bytes, count: int | None = None) -> dict[str, Any]:
    if count is None:
        count = len(data) if dtype == NESTED else len(data) // _itemsize(dtype)
    return {"dtype": dtype, "offset": offset, "count": count}


def _itemsize(dtype: str) -> int:
    return compact.ITEMSIZE.get(dtype) or np.dtype(dtype).itemsize


@dataclass
class TraceColumns:
    """One trace's token fields as lists, and its other fields as JSON-mode data."""

    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[float]
    logprobs: list[float]
    tokens: list[str | None]
    rest: dict[str, Any]


def pack_traces(writer: ArrayWriter, traces: list[TraceColumns], compact_layout: bool = False) -> list[dict[str, Any]]:
    # Prompts first and back to back: the per_request builder's traces are one conversation
    # whose every prompt extends the one before, so each is written as its predecessor plus
    # the new ids (the references overlap), and a response that reappears in the next prompt
    # is a reference into it. Decoding is unchanged: every array is still one contiguous slice.
    id_dtype = compact.id_dtype([ids for t in traces for ids in (t.prompt_ids, t.response_ids)]) \
        if compact_layout else None

    def ids(values: list[int]) -> tuple[str, bytes]:
        return (id_dtype, compact.pack_ids(values, id_dtype)) if id_dtype else pack_ints(values)

    prompts = [writer.add_extending(*ids(t.prompt_ids)) for t in traces]
    packed = []
    for prompt, t in zip(prompts, traces):
        dtype, response = ids(t.response_ids)
        after_prompt = None
        if prompt["dtype"] == dtype != NESTED:
            after_prompt = prompt["offset"] + prompt["count"] * _itemsize(dtype)
        out = {"prompt_ids": prompt, "response_ids": writer.add(dtype, response, reuse_at=after_prompt)}
        flags = compact.mask_flags(t.loss_mask) if compact_layout else None
        if flags is None:
            out["loss_mask"] = writer.add(*pack_floats(t.loss_mask, flags=True))
            out["response_logprobs"] = writer.add(*pack_floats(t.logprobs))
        else:
            mask_dtype, mask, count = compact.pack_mask(flags)
            out["loss_mask"] = writer.add(mask_dtype, mask, count=count)
            out["response_logprobs"] = _add_logprobs(writer, t.logprobs, flags)
        if t.tokens.count(None) != len(t.tokens):
            out[TOKENS_FIELD] = writer.add(NESTED, pack(t.tokens))
        packed.append({**out, **t.rest})
    return packed


def _add_logprobs(writer: ArrayWriter, logprobs: list[float], flags: np.ndarray) -> dict[str, Any]:
    """Only the sampled tokens' logprobs, with the one value the others carry as ``fill``, when
    they all carry one; else all of them."""
    split = compact.split_logprobs(logprobs, flags)
    if split is None:
        return writer.add(*pack_floats(logprobs))
    sampled, fill = split
    dtype, data = pack_floats([*sampled, float(fill)])  # the fill must be exact in the same dtype
    size = np.dtype(dtype).itemsize
    return {**writer.add(dtype, data[:-size]), "fill": data[-size:]}


def write_blob(fields: dict[str, Any], traces: list[TraceColumns], layout: str = "compact") -> bytes:
    """The blob of ``fields`` (a JSON-mode dump of a result or a trajectory, without its
    traces) and ``traces``, in ``layout`` (``LAYOUTS``: "compact" writes version 3, "aligned"
    version 2)."""
    try:
        version = LAYOUTS[layout]
    except KeyError:
        raise BlobFormatError(f"unknown blob layout {layout!r} (one of {sorted(LAYOUTS)})") from None
    holder = fields["trajectory"] if "trajectory" in fields else fields
    holder["traces"] = []  # in place first: the map's size goes into the head, laid out before the arrays
    head = _map_header(len(fields) + 2) + _VERSION_KEY_PACKED + pack(version) + _ARRAYS_KEY_PACKED
    writer = ArrayWriter(len(head) + 5)
    holder["traces"] = pack_traces(writer, traces, compact_layout=version == LAYOUTS["compact"])
    arrays = writer.buffer
    if len(arrays) >= 2**32:
        raise BlobFormatError(f"{len(arrays)} bytes of token arrays do not fit one blob (4 GiB at most)")
    parts: list[bytes | bytearray] = [head, bytes([_BIN32]), len(arrays).to_bytes(4, "big"), arrays]
    for key, value in fields.items():
        parts += (pack(key), pack(value))
    return b"".join(parts)


def _map_header(n: int) -> bytes:
    return bytes([0x80 | n]) if n < 16 else b"\xde" + n.to_bytes(2, "big")


# --- reading --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Frame:
    """A version-2 blob, taken apart: the other fields parsed, the arrays bin located."""

    version: int
    fields: dict[str, Any]
    buffer: Any  # the caller's blob: views into it keep it alive
    arrays_start: int
    arrays_size: int

    def view(self, ref: dict[str, Any]) -> np.ndarray:
        """A numpy view of the blob for ``ref``: no copy, read-only when the blob is bytes."""
        dtype, offset, count = _checked(ref, self.arrays_size)
        if dtype == compact.U2:
            return compact.unpack_ids(self.buffer, self.arrays_start + offset, count, dtype)
        if dtype not in PLAIN_DTYPES:
            raise BlobFormatError(f"a {dtype!r} reference is not an array of plain values")
        return np.frombuffer(self.buffer, dtype=dtype, count=count, offset=self.arrays_start + offset)

    def ids(self, ref: dict[str, Any]) -> np.ndarray | list[Any]:
        """Token ids: a view, a widened copy (3-byte ids), or the list a nested reference holds
        (ids beyond 64 bits)."""
        dtype, offset, count = _checked(ref, self.arrays_size)
        if dtype == compact.U3:
            return compact.unpack_ids(self.buffer, self.arrays_start + offset, count, dtype)
        return self.values(ref)

    def mask(self, ref: dict[str, Any], length: int) -> np.ndarray:
        """The loss mask of a ``length``-token response: a view, or expanded from runs or bits."""
        dtype, offset, count = _checked(ref, self.arrays_size)
        if dtype in (compact.RUNS, compact.BITS):
            return compact.unpack_mask(self.buffer, self.arrays_start + offset, count, dtype, length)
        out = self.view(ref)
        if out.size != length:
            raise BlobFormatError(f"a loss mask of {out.size} tokens for a response of {length}")
        return out

    def logprobs(self, ref: dict[str, Any], mask: np.ndarray) -> np.ndarray:
        """Every response token's logprob: a view, or the sampled ones scattered over ``fill``."""
        values = self.view(ref)
        if "fill" not in ref:
            return values
        fill = ref["fill"]
        if not isinstance(fill, (bytes, bytearray)):
            raise BlobFormatError(f"a logprob fill must be bytes, not {type(fill).__name__}")
        return compact.scatter_logprobs(values, bytes(fill), mask)

    def nested(self, ref: dict[str, Any]) -> Any:
        dtype, offset, count = _checked(ref, self.arrays_size)
        if dtype != NESTED:
            raise BlobFormatError(f"expected a nested msgpack value, got dtype {dtype}")
        start = self.arrays_start + offset
        return unpack(memoryview(self.buffer)[start:start + count])

    def values(self, ref: dict[str, Any]) -> np.ndarray | list[Any]:
        """An array view, or the list a nested reference holds (ids beyond 64 bits)."""
        return self.nested(ref) if _checked(ref, self.arrays_size)[0] == NESTED else self.view(ref)


def read_frame(blob: Any) -> Frame | None:
    """The parts of a version-2 blob; None for a version-1 blob (no ``blob_version`` first)."""
    mv = memoryview(blob).cast("B")
    try:
        return _read_frame(blob, mv)
    except IndexError:
        raise BlobFormatError("blob truncated in its head") from None


def _read_frame(blob: Any, mv: memoryview) -> Frame | None:
    n, pos = _read_map_header(mv)
    if mv[pos:pos + len(_VERSION_KEY_PACKED)] != _VERSION_KEY_PACKED:
        return None
    pos += len(_VERSION_KEY_PACKED)
    version = mv[pos]
    if version >= 0x80:  # not a positive fixint: no version this code knows
        raise BlobFormatError(f"unreadable blob_version (msgpack type byte 0x{version:02x})")
    check_version(version)
    pos += 1
    if mv[pos:pos + len(_ARRAYS_KEY_PACKED) + 1] != _ARRAYS_KEY_PACKED + bytes([_BIN32]):
        raise BlobFormatError(f'a version-{version} blob must have "arrays" (bin32) as its second entry')
    pos += len(_ARRAYS_KEY_PACKED) + 1
    size = int.from_bytes(mv[pos:pos + 4], "big")
    start = pos + 4
    if start + size > len(mv):
        raise BlobFormatError("blob truncated inside its arrays")
    return Frame(version, _read_entries(mv[start + size:], n - 2), blob, start, size)


def check_version(version: Any) -> None:
    """Version 1 has no ``blob_version`` key, so a blob that names its version must be 2 or 3."""
    if version not in LAYOUTS.values() or isinstance(version, bool):
        known = ", ".join(str(v) for v in sorted(LAYOUTS.values()))
        raise BlobFormatError(f"blob_version {version!r} is not one this code reads (1: no blob_version, "
                              f"{known}): upgrade polar-rollout on the reading side")


def _read_map_header(mv: memoryview) -> tuple[int, int]:
    first = mv[0] if len(mv) else None
    if first is not None and 0x80 <= first <= 0x8F:
        return first & 0x0F, 1
    if first == 0xDE:
        return int.from_bytes(mv[1:3], "big"), 3
    if first == 0xDF:
        return int.from_bytes(mv[1:5], "big"), 5
    raise BlobFormatError("a result blob is a msgpack map")


def _read_entries(mv: memoryview, n: int) -> dict[str, Any]:
    reader = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(mv), 1))
    reader.feed(mv)
    out = {}
    try:
        for _ in range(n):
            key = reader.unpack()
            out[key] = reader.unpack()
    except msgpack.OutOfData:
        raise BlobFormatError("blob truncated in its fields") from None
    return out


def _checked(ref: Any, size: int) -> tuple[str, int, int]:
    try:
        dtype, offset, count = ref["dtype"], int(ref["offset"]), int(ref["count"])
    except (KeyError, TypeError, ValueError):
        raise BlobFormatError(f"not an array reference: {ref!r}") from None
    if dtype not in DTYPES:
        raise BlobFormatError(f"unknown array dtype {dtype!r}")
    special = compact.nbytes(dtype, count)
    nbytes = count if dtype == NESTED else special if special is not None else count * np.dtype(dtype).itemsize
    if offset < 0 or count < 0 or offset + nbytes > size:
        raise BlobFormatError(f"array reference {ref!r} lies outside the arrays ({size} bytes)")
    return dtype, offset, count
