"""pipeline/codec.py: JSON nesting limits (the level-by-level walk agrees with a plain recursive
depth on arbitrary JSON, exactly at the limit), and the extension types of completion records
(packed ids and floats, JSON documents) giving back exactly what went in; JSON text in and out
keeping integers beyond 64 bits exact."""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pipeline.codec import (
    JSON_DOC,
    U32_ARRAY,
    exact_json,
    f64_array,
    json_bytes,
    json_doc,
    nesting_depth_exceeds,
    pack,
    u32_array,
    unpack,
)

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
                    max_leaves=40)


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


@given(JSON)
def test_walk_agrees_with_recursive_depth(value):
    d = depth(value)
    assert not nesting_depth_exceeds(value, d)
    if d:
        assert nesting_depth_exceeds(value, d - 1)


def test_deep_chains_without_recursion():
    value: Any = "leaf"
    for i in range(5000):
        value = [value] if i % 2 else {"k": value}
    assert nesting_depth_exceeds(value, 4999) and not nesting_depth_exceeds(value, 5000)


# --- the record extension types: what goes in comes back, as plain values -----------------------

IDS = st.lists(st.integers(min_value=0, max_value=2**32 - 1), max_size=50)


@given(IDS)
def test_u32_arrays_round_trip(ids):
    packed = u32_array(ids)
    assert isinstance(packed, msgpack.ExtType) and packed.code == U32_ARRAY and len(packed.data) == 4 * len(ids)
    assert unpack(pack({"ids": packed})) == {"ids": ids}


@given(st.lists(st.integers(), min_size=1, max_size=20).filter(lambda v: min(v) < 0 or max(v) >= 2**32))
def test_ids_outside_uint32_stay_a_list(ids):
    assert u32_array(ids) is ids


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10, 10), max_size=30))
def test_f64_arrays_round_trip_bit_for_bit(values):
    back = unpack(pack(f64_array(values)))
    assert [struct.pack("<d", v) for v in back] == [struct.pack("<d", float(v)) for v in values]


def test_f64_array_of_non_numbers_stays_a_list():
    values = [0.5, "x"]
    assert f64_array(values) is values


JSON64 = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
                      | st.text(max_size=5),
                      lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
                      max_leaves=40)


@given(JSON64)
def test_json_docs_round_trip(value):
    doc = json_doc(value)
    assert doc.code == JSON_DOC and unpack(pack([doc])) == [value]


def test_json_doc_keeps_the_text_it_is_given_and_falls_back_when_json_cannot_hold_a_value():
    assert unpack(pack(json_doc({"a": 1}, b'{ "a" : 1 }'))) == {"a": 1}
    wide = {"n": 2**70}  # a client's integer beyond 64 bits: msgpack's own path keeps it (as text)
    assert json_doc(wide) is wide
    assert unpack(pack(wide)) == {"n": str(2**70)}


def test_a_corrupt_extension_fails_to_decode_and_unknown_codes_pass_through():
    with pytest.raises(orjson.JSONDecodeError):
        unpack(pack(msgpack.ExtType(JSON_DOC, b"{not json")))
    with pytest.raises(ValueError):
        unpack(pack(msgpack.ExtType(U32_ARRAY, b"\x01\x02\x03")))  # not a whole number of ids
    assert unpack(pack(msgpack.ExtType(42, b"x"))) == msgpack.ExtType(42, b"x")


WIDE_JSON = st.recursive(st.none() | st.booleans() | st.integers(min_value=-(10**40), max_value=10**40)
                         | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
                         lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
                         max_leaves=30)


@given(WIDE_JSON)
@example(-(2**63) - 1)  # a bare number, no ":[," before it: orjson's rounding went unseen
@example(2**64)
def test_json_bytes_and_exact_json_round_trip_integers_of_any_width(value):
    raw = json_bytes(value)
    assert exact_json(raw, orjson.loads(raw)) == value


def test_wide_integers_are_written_and_read_exactly_where_orjson_refuses_or_rounds():
    wide = {"id": 123456789012345678901234567890, "n": -(2**64), "x": [1.5, float("inf")], "s": "é"}
    assert orjson.loads(json_bytes(wide)) == {"id": 1.2345678901234568e29, "n": float(-(2**64)), "x": [1.5, None], "s": "é"}
    raw = json_bytes(wide)
    assert b"123456789012345678901234567890" in raw and "é".encode() in raw  # exact, and not \u-escaped
    parsed = orjson.loads(raw)
    assert exact_json(raw, parsed) == {**wide, "x": [1.5, None]}
    narrow = b'{"seed": 18446744073709551615, "hash": "1234567890123456789012345"}'  # 2**64-1 fits; a string is no integer
    assert exact_json(narrow, (p := orjson.loads(narrow))) is p
    with pytest.raises(TypeError):
        json_bytes({"x": object()})


@pytest.mark.parametrize("raw, wide", [
    (b'{"a": 123456789012345678901}', "123456789012345678901"),
    (b'[1, -123456789012345678901]', "-123456789012345678901"),
    (b'{"a": [1,\n  99999999999999999999]}', "99999999999999999999"),
    (b'{"a": 18446744073709551616}', "18446744073709551616"),  # 2**64
    (b'{"a": 18446744073709551615}', None),  # 2**64 - 1 fits
    (b'{"a": "2**100 = 1267650600228229401496703205376"}', None),  # in a string, passed over without a parse
    (b'{"a": "t:1267650600228229401496703205376"}', None),  # in a string, looks like a token: parsed, not one
    (b'{"a": 1234567890123456789012.5, "b": 1e300}', None),  # floats are JSON's to round
    (b'{"s": "12345678901234567890123", "n": 12345678901234567890123}', "12345678901234567890123"),
])
def test_inexact_integer_finds_integer_tokens_beyond_64_bits_only(raw, wide):
    from pipeline.codec import inexact_integer

    assert inexact_integer(raw) == wide


def test_a_record_with_a_wide_integer_keeps_its_extensions():
    # pack's fallback writes the integer as text; the packed arrays and JSON texts beside it
    # (ExtType is a tuple) must stay extensions, or the record no longer decodes as one.
    record = {"ids": u32_array([1, 2, 3]), "logprobs": f64_array([-0.5]), "doc": json_doc({"a": 1}),
              "request": {"seed": 2**70, "n": [-(2**63) - 1]}}
    assert unpack(pack(record)) == {"ids": [1, 2, 3], "logprobs": [-0.5], "doc": {"a": 1},
                                    "request": {"seed": str(2**70), "n": [str(-(2**63) - 1)]}}
