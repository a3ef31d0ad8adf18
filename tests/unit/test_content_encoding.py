"""Compressed request bodies (pure): each coding undone, in reverse order for a list, never past
the limit, and a body that is not what its coding says is the client's 400."""

from __future__ import annotations

import gzip
import zlib

import pytest
import zstandard

from proxy.content_encoding import decoded
from proxy.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType

BODY = b'{"model": "m", "input": "' + b"hello " * 2000 + b'"}'


@pytest.mark.parametrize("coding, pack", [
    ("gzip", gzip.compress), ("x-gzip", gzip.compress), ("deflate", zlib.compress),
    ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, as some clients send it
    ("zstd", lambda b: zstandard.ZstdCompressor(level=3).compress(b)),
    ("zstd", lambda b: zstandard.ZstdCompressor(write_content_size=False).compress(b)),  # streamed: no size
    ("identity", lambda b: b), ("GZIP ", gzip.compress),
])
def test_each_coding_is_undone(coding, pack):
    assert decoded(pack(BODY), coding, 1 << 20) == BODY


def test_every_member_of_a_gzip_stream_is_read():
    half = len(BODY) // 2
    assert decoded(gzip.compress(BODY[:half]) + gzip.compress(BODY[half:]), "gzip", 1 << 20) == BODY
    with pytest.raises(BadRequest, match="after the end"):
        decoded(zlib.compress(BODY) + b"junk", "deflate", 1 << 20)


def test_a_body_of_many_gzip_members_is_refused_before_it_costs_the_square_of_its_size():
    """Each member's end copies the input left: 100,000 empty members in 2 MB held a proxy worker
    4 s (a 6 MB body, 80 s: the proxy stopped answering). A client sends one member; a few are read."""
    with pytest.raises(BadRequest, match="more than 16 gzip members"):
        decoded(gzip.compress(b"") * 50_000 + gzip.compress(BODY), "gzip", 64 << 20)
    assert decoded(gzip.compress(b"") * 15 + gzip.compress(BODY), "gzip", 1 << 20) == BODY


def test_a_list_of_codings_is_undone_in_reverse():
    packed = zstandard.ZstdCompressor().compress(gzip.compress(BODY))  # gzip first, then zstd
    assert decoded(packed, "gzip, zstd", 1 << 20) == BODY


@pytest.mark.parametrize("coding, pack", [("gzip", gzip.compress), ("deflate", zlib.compress),
                                          ("zstd", lambda b: zstandard.ZstdCompressor().compress(b)),
                                          ("zstd", lambda b: zstandard.ZstdCompressor(write_content_size=False).compress(b))])
def test_a_bomb_stops_at_the_limit(coding, pack):
    bomb = pack(b"{" + b" " * 50_000_000 + b"}")  # ~50 MB of JSON in well under 100 KB
    assert len(bomb) < 100_000
    with pytest.raises(PayloadTooLarge):
        decoded(bomb, coding, 1_000_000)


# (Ids of their own: one made of gzip's bytes held its clock, and the two test processes collected
# it a second apart: xdist refuses collections that differ)
@pytest.mark.parametrize("coding, data", [("gzip", b"not gzip at all"), ("zstd", b"\x28\xb5\x2f\xfdnope"),
                                          ("gzip", gzip.compress(BODY, mtime=0)[:-20]), ("deflate", b"\x00\x01garbage")],
                         ids=["gzip-not-gzip", "zstd-bad-frame", "gzip-cut-short", "deflate-garbage"])
def test_data_that_is_not_its_coding_is_a_bad_request(coding, data):
    with pytest.raises(BadRequest) as info:
        decoded(data, coding, 1 << 20)
    assert type(info.value) is BadRequest and f"not valid {coding} data" in info.value.message


def test_an_unknown_coding_is_415_naming_what_is_supported():
    with pytest.raises(UnsupportedMediaType) as info:
        decoded(b"x", "br", 1 << 20)
    assert info.value.status == 415 and "'br'" in info.value.message and "zstd" in info.value.message


def test_a_zstd_frame_asking_for_a_window_beyond_the_body_limit_is_refused():
    """A frame names the window its decoder must allocate (up to 128 MB by the library's default,
    per request): one larger than the body limit is refused before anything is allocated."""
    params = zstandard.ZstdCompressionParameters.from_level(19, window_log=26, write_content_size=False)
    streamer = zstandard.ZstdCompressor(compression_params=params).compressobj()  # size unknown: the window stays
    big_window = streamer.compress(b"x" * 100) + streamer.flush()  # 64 MB
    for limit in (1 << 20, 64 << 20):  # the default limit too: 8 MB at most, whatever the limit
        with pytest.raises(PayloadTooLarge, match="asks for more"):
            decoded(big_window, "zstd", limit)
    level19 = zstandard.ZstdCompressor(level=19).compressobj()  # its 8 MB window, size unknown: read
    body = b'{"input": "' + b"y" * 3_000_000 + b'"}'
    assert decoded(level19.compress(body) + level19.flush(), "zstd", 64 << 20) == body
