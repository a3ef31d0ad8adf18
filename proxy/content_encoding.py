"""Compressed request bodies (pure): ``Content-Encoding: zstd`` or ``gzip`` (Codex CLI compresses
large Responses bodies with zstd; pi's Codex-style path does too), ``deflate``, and a list of
them (applied in order, so undone in reverse). A body is never inflated past the proxy's request
limit (a small bomb cannot become gigabytes): past it, ``PayloadTooLarge``."""

from __future__ import annotations

import io
import zlib
from typing import Callable

from proxy.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType


def decoded(raw: bytes, content_encoding: str | None, limit: int) -> bytes:
    """``raw`` with its content codings undone, at most ``limit`` bytes."""
    if not content_encoding:
        return raw
    for coding in reversed([c.strip().lower() for c in content_encoding.split(",") if c.strip()]):
        if coding == "identity":
            continue
        decode = DECODERS.get(coding)
        if decode is None:
            raise UnsupportedMediaType(f"request Content-Encoding {coding!r} is not supported "
                                       f"(supported: {', '.join(sorted(DECODERS))}, identity)")
        try:
            raw = decode(raw, limit)
        except PayloadTooLarge:
            raise
        except Exception as exc:  # noqa: BLE001 -- every codec's own error: the body is not what it says
            raise BadRequest(f"request body is not valid {coding} data ({type(exc).__name__}: {exc})") from None
        if len(raw) > limit:
            raise PayloadTooLarge(f"request body exceeds {limit} bytes once decompressed")
    return raw


# gzip may hold several members, one after another (concatenated files; an HTTP client sends
# one). Each member's end hands back a copy of the input left, so many tiny members cost the
# square of the body's size: 100,000 empty ones in a 2 MB body took 4 s of a proxy worker, and
# a 6 MB body froze both workers for 80 s. A few are read; more are the client's error.
MAX_GZIP_MEMBERS = 16


def _zlib(raw: bytes, limit: int, wbits: int) -> bytes:
    out = bytearray()
    for _ in range(MAX_GZIP_MEMBERS):
        inflater = zlib.decompressobj(wbits)
        out += inflater.decompress(raw, limit + 1 - len(out))
        if len(out) > limit:
            raise PayloadTooLarge(f"request body exceeds {limit} bytes once decompressed")
        if not inflater.eof:
            raise ValueError("the compressed data ends early")
        raw = inflater.unused_data
        if not raw or wbits != 16 + zlib.MAX_WBITS:
            if raw:
                raise ValueError("data after the end of the compressed stream")
            return bytes(out)
    raise ValueError(f"more than {MAX_GZIP_MEMBERS} gzip members in one body")


def _gzip(raw: bytes, limit: int) -> bytes:
    return _zlib(raw, limit, 16 + zlib.MAX_WBITS)


def _deflate(raw: bytes, limit: int) -> bytes:
    # HTTP's "deflate" is the zlib format; some clients send raw deflate: both are read.
    try:
        return _zlib(raw, limit, zlib.MAX_WBITS)
    except zlib.error:
        return _zlib(raw, limit, -zlib.MAX_WBITS)


MAX_ZSTD_WINDOW = 8 << 20


def _zstd(raw: bytes, limit: int) -> bytes:
    import zstandard

    # A frame names the window its decoder must allocate (the library allows up to 128 MB, per
    # request: a memory bomb across many connections). 8 MB is what RFC 8878 asks decoders to
    # support and what zstd's levels up to 19 use; never more than the body limit itself.
    window = min(MAX_ZSTD_WINDOW, max(1 << 20, 1 << max(limit - 1, 1).bit_length()))
    reader = zstandard.ZstdDecompressor(max_window_size=window).stream_reader(io.BytesIO(raw), read_across_frames=True)
    try:
        out = reader.read(limit + 1)
    except zstandard.ZstdError as exc:
        if "too much memory" in str(exc):  # a window (or a declared size) beyond the limit
            raise PayloadTooLarge(f"request body exceeds {limit} bytes once decompressed (its zstd frame asks "
                                  "for more)") from None
        raise
    if len(out) > limit:
        raise PayloadTooLarge(f"request body exceeds {limit} bytes once decompressed")
    if raw and not out:
        raise ValueError("no complete zstd frame")
    # (A frame cut short reads as the text before the cut: never valid JSON, the parser says so.)
    return out


DECODERS: dict[str, Callable[[bytes, int], bytes]] = {"gzip": _gzip, "x-gzip": _gzip, "deflate": _deflate,
                                                      "zstd": _zstd}
