"""The encodings a version-3 ("compact") blob adds to version 2's plain arrays, each chosen only
when it gives back exactly what was written (``docs/result-blobs.md``):

* ids as ``<u2`` (every id < 65,536) or ``u3`` (3-byte little-endian, every id < 2^24: every real
  vocabulary), chosen once per blob so that shared prompt bytes stay shareable;
* a 0/1 loss mask as ``runs`` (uint32 lengths of alternating 0 and 1 runs, starting with 0s)
  or ``bits`` (``np.packbits``, little bit order), whichever is smaller;
* logprobs only where the mask is not 0 (``fill``: the one value every other token carries, as
  the raw bytes of one element), when every masked token carries the same value bit for bit.

Decoding these copies (the id widening, the mask expansion, the logprob scatter), a few
milliseconds per million tokens; ``<u2`` ids and the sampled logprobs stay views of the blob.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.errors import BlobFormatError

U3 = "u3"
RUNS = "runs"
BITS = "bits"
U2 = "<u2"
# Bytes per element of the compact dtypes (``bits``: count is in tokens, 1/8 byte each).
ITEMSIZE = {U2: 2, U3: 3, RUNS: 4}


def id_dtype(arrays: list[list[int]]) -> str | None:
    """The compact dtype for every id of a blob, or None (an id outside [0, 2^24): version 2's
    per-array rules apply)."""
    lo, hi = 0, 0
    for values in arrays:
        if values:
            lo, hi = min(lo, min(values)), max(hi, max(values))
    if lo < 0 or hi >= 2**24:
        return None
    return U2 if hi < 2**16 else U3


def pack_ids(values: list[int], dtype: str) -> bytes:
    if dtype == U2:
        return np.asarray(values, dtype="<u2").tobytes()
    wide = np.asarray(values, dtype="<u4")
    return wide.view(np.uint8).reshape(-1, 4)[:, :3].tobytes()


def unpack_ids(buffer: Any, offset: int, count: int, dtype: str) -> np.ndarray:
    """``<u2``: a view of the blob; ``u3``: widened into a fresh int32 array."""
    if dtype == U2:
        return np.frombuffer(buffer, dtype="<u2", count=count, offset=offset)
    out = np.empty(count, dtype="<i4")
    # Each id read as the 4 bytes starting at it (a strided view, no copy) with the byte of the
    # next id masked off: one pass, ~10x faster than copying 3-byte columns. The last id has no
    # byte after it when the array ends the buffer, so it is read on its own then.
    inside = count if offset + 3 * count < memoryview(buffer).nbytes else max(0, count - 1)
    if inside:
        windows = np.ndarray((inside,), dtype="<i4", buffer=buffer, offset=offset, strides=(3,))
        np.bitwise_and(windows, 0xFFFFFF, out=out[:inside])
    if inside < count:
        start = offset + 3 * inside
        out[inside] = int.from_bytes(memoryview(buffer).cast("B")[start:start + 3], "little")
    return out


def mask_flags(values: list[float]) -> np.ndarray | None:
    """The mask as booleans when it is 0.0 and 1.0 only (a -0.0 keeps its sign elsewhere)."""
    wide = np.asarray(values, dtype=np.float64)
    ones = wide == 1.0
    if not bool(np.all(ones | (wide == 0.0))) or np.signbit(wide).any():
        return None
    return ones


def pack_mask(flags: np.ndarray) -> tuple[str, bytes, int]:
    """(dtype, bytes, count) of a 0/1 mask: runs when they are smaller than one bit a token."""
    n = flags.size
    if n == 0:
        return RUNS, b"", 0
    edges = np.flatnonzero(np.diff(flags.astype(np.int8))) + 1
    bounds = np.concatenate(([0], edges, [n]))
    runs = np.diff(bounds).astype("<u4")
    if flags[0]:
        runs = np.concatenate((np.zeros(1, "<u4"), runs))  # runs start with the 0s, maybe none
    if 4 * runs.size <= (n + 7) // 8:
        return RUNS, runs.tobytes(), int(runs.size)
    return BITS, np.packbits(flags, bitorder="little").tobytes(), n


def unpack_mask(buffer: Any, offset: int, count: int, dtype: str, length: int) -> np.ndarray:
    """The mask as uint8 0/1, ``length`` tokens long (the response's), checked against it."""
    if dtype == BITS:
        if count != length:
            raise BlobFormatError(f"a loss mask of {count} tokens for a response of {length}")
        raw = np.frombuffer(buffer, dtype=np.uint8, count=(count + 7) // 8, offset=offset)
        return np.unpackbits(raw, count=count, bitorder="little")
    runs = np.frombuffer(buffer, dtype="<u4", count=count, offset=offset)
    if int(runs.sum(dtype=np.uint64)) != length:
        raise BlobFormatError(f"loss-mask runs cover {int(runs.sum(dtype=np.uint64))} tokens, the response {length}")
    values = (np.arange(count, dtype=np.uint8) & 1)
    return np.repeat(values, runs)


def split_logprobs(values: list[float], flags: np.ndarray) -> tuple[list[float], np.float64] | None:
    """(the logprobs where the mask is 1, the value every other token carries) when those
    others all carry one value bit for bit; None otherwise (stored whole)."""
    wide = np.asarray(values, dtype=np.float64)
    rest = wide[~flags]
    if rest.size == 0 or flags.all():
        return None  # nothing to leave out
    bits = rest.view(np.uint64)
    if not bool(np.all(bits == bits[0])):
        return None
    return wide[flags].tolist(), rest[0]


def scatter_logprobs(sampled: np.ndarray, fill: bytes, mask: np.ndarray) -> np.ndarray:
    """Every token's logprob: ``sampled`` where the mask is 1, ``fill`` (one element's bytes,
    so a NaN keeps its payload) elsewhere."""
    if len(fill) != sampled.dtype.itemsize:
        raise BlobFormatError(f"a logprob fill of {len(fill)} bytes for dtype {sampled.dtype.str}")
    where = mask.astype(bool)
    if int(np.count_nonzero(where)) != sampled.size:
        raise BlobFormatError(f"{sampled.size} sampled logprobs for {int(np.count_nonzero(where))} trainable tokens")
    out = np.empty(mask.size, dtype=sampled.dtype)
    out[...] = np.frombuffer(fill, dtype=sampled.dtype)[0]
    out[where] = sampled
    return out


def nbytes(dtype: str, count: int) -> int | None:
    """Bytes a compact reference spans; None for a dtype that is not one of these."""
    if dtype == BITS:
        return (count + 7) // 8
    size = ITEMSIZE.get(dtype)
    return None if size is None else size * count
