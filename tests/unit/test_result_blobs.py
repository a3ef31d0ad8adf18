"""Result blobs (pipeline/blobs): exact round trips in both layouts, the encoding each array
gets, version dispatch, malformed blobs, and the version-1 and version-2 blobs written before."""

from __future__ import annotations

import math

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from pipeline.blobs import (
    LAYOUTS,
    decode_arrays,
    decode_result,
    decode_trajectory,
    encode_result,
    encode_trajectory,
    summary_from_blob,
)
from pipeline.codec import pack, unpack
from pipeline.errors import BlobFormatError
from pipeline.schemas import SessionResult, TokenLogprob, Trace, Trajectory
from pipeline.status import SessionStatus
from tests.unit.blob_fixtures import v1_cases


def trace(prompt, response, mask=None, logprobs=None, tokens=None, **kw) -> Trace:
    mask = [1.0] * len(response) if mask is None else mask
    logprobs = [-0.5] * len(response) if logprobs is None else logprobs
    tokens = tokens or [None] * len(response)
    return Trace(prompt_ids=prompt, response_ids=response, loss_mask=mask,
                 response_logprobs=[TokenLogprob(token_id=t, logprob=lp, token=s)
                                    for t, lp, s in zip(response, logprobs, tokens)], **kw)


def result(*traces: Trace, **kw) -> SessionResult:
    return SessionResult(session_id="sess-1", task_id="task-1", status=SessionStatus.COMPLETED,
                         trajectory=Trajectory(traces=list(traces)), **kw)


def same(a: SessionResult | Trajectory, b: SessionResult | Trajectory) -> bool:
    """Bit for bit: the version-1 encoding compares floats by their bytes (NaN, -0.0 included)."""
    return pack(a) == pack(b)


def refs(blob: bytes, index: int = 0) -> dict:
    return unpack(blob)["trajectory"]["traces"][index]


# --- round trips ------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_edge_cases_round_trip_exactly(layout):
    r = result(
        trace([1, 2, 3], [4, 5, 6], [1.0, 0.0, 1.0], [-0.25, 0.0, -3.0], ["a", None, "c"],
              prompt_messages=[{"role": "user", "content": "hi"}], tools=[{"type": "function"}],
              finish_reason="stop", reward=0.5, metadata={"turns": [{"response_start": 0}]}),
        trace([], []),                                                       # an empty trace
        trace([7], [], finish_reason="length"),                              # a prompt without a response
        trace([2**31 - 1, -1], [2**31, 0], logprobs=[float("nan"), float("-inf")]),
        trace([0], [2**63 - 1, 2**64 - 1], mask=[0.5, -0.0], logprobs=[-1e-300, -0.0]),
        trace([2**64 + 5], [2**70], logprobs=[1e300]),                       # beyond 64 bits
        trace([1, 2], [3, 4, 5], [0.0, 1.0, 0.0], [float("nan"), -0.5, float("nan")]),  # a NaN fill
        trace([1], [3, 4], [0.0, 0.0], [-0.0, -0.0]),                        # nothing sampled: -0.0 fill
        reward=1.0, evaluation={"passed": True}, metadata={"policy_version": "3"})
    assert same(decode_result(encode_result(r, layout)), r)
    assert same(decode_trajectory(encode_trajectory(r.trajectory, layout)), r.trajectory)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_an_empty_trajectory_round_trips(layout):
    r = SessionResult(session_id="s", task_id="t", status=SessionStatus.ERROR, error="no completions",
                      trajectory=Trajectory(status=SessionStatus.ERROR, error="no completions"))
    assert same(decode_result(encode_result(r, layout)), r)
    assert decode_arrays(encode_result(r, layout)).traces == []


# Vocabulary-sized ids (the compact encodings), and ids at every width the schema allows.
ids = st.integers(0, 300) | st.integers(0, 2**24 - 1) | st.integers(0, 2**40) | st.integers(-(2**63), 2**64 - 1)
floats = st.floats(allow_nan=True, allow_infinity=True, width=64) | st.floats(width=32)
FILLS = (0.0, -0.0, float("nan"), -1.5)


@st.composite
def traces(draw) -> Trace:
    id_values = draw(st.sampled_from([st.integers(0, 65_535), st.integers(0, 151_935), ids]))
    response = draw(st.lists(id_values, max_size=40))
    n = len(response)
    # Masks of runs (as builders make them), scattered flags, and weights.
    flags = draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n) |
                 st.lists(st.sampled_from([0.0, 1.0]) | floats, min_size=n, max_size=n))
    fill = draw(st.sampled_from(FILLS) | floats)
    logprobs = [draw(floats) if m != 0.0 else (fill if draw(st.booleans()) or n < 3 else draw(floats))
                for m in flags]
    tokens = draw(st.lists(st.none() | st.text(max_size=3), min_size=n, max_size=n))
    return trace(draw(st.lists(id_values, max_size=40)), response, flags, logprobs, tokens)


@settings(max_examples=300, deadline=None)
@given(st.lists(traces(), max_size=4), st.sampled_from(sorted(LAYOUTS)))
def test_any_traces_round_trip_exactly_in_both_decoders(generated, layout):
    r = result(*generated)
    blob = encode_result(r, layout)
    assert same(decode_result(blob), r)
    for t, arrays in zip(r.trajectory.traces, decode_arrays(blob).traces):
        assert arrays.prompt_ids.tolist() == t.prompt_ids and arrays.response_ids.tolist() == t.response_ids
        assert _bits(arrays.loss_mask.tolist()) == _bits(t.loss_mask)
        assert _bits(arrays.response_logprobs.tolist()) == _bits([lp.logprob for lp in t.response_logprobs])
        assert _bits(arrays.sampled_logprobs.tolist()) == \
            _bits([lp.logprob for lp, m in zip(t.response_logprobs, t.loss_mask) if m != 0])
        tokens = [lp.token for lp in t.response_logprobs]
        assert arrays.response_tokens == (tokens if any(s is not None for s in tokens) else None)


ADDED_SINCE_V1 = {"node_id", "register_to_init_queue_ms", "init_ms", "ready_queue_ms", "run_ms", "postrun_queue_ms",
                  "postrun_ms", "eval_ms", "e2e_ms"}


def _without_added(new: dict, old: dict, added: list) -> dict:
    """``new`` without the keys ``old`` lacks, at any depth (their names go to ``added``)."""
    out = {}
    for k, v in new.items():
        if k not in old:
            added.append(k)
        elif isinstance(v, dict) and isinstance(old[k], dict):
            out[k] = _without_added(v, old[k], added)
        else:
            out[k] = v
    return out


def _bits(values: list[float]) -> list[str]:
    return ["nan" if math.isnan(v) else float(v).hex() for v in values]


# --- what each array becomes ------------------------------------------------------------------

def test_each_array_gets_the_smallest_exact_dtype_in_the_aligned_layout():
    f32 = float.fromhex("-0x1.8p-3")  # exactly a float32
    blob = encode_result(result(
        trace([1, 2], [3, 4], [1.0, 0.0], [f32, 0.0]),
        trace([2**40], [2**64 - 1], [0.5], [-0.1]),
        trace([0], [5], [-0.0], [f32])), layout="aligned")
    plain, wide, signed = refs(blob, 0), refs(blob, 1), refs(blob, 2)
    assert [plain[k]["dtype"] for k in ("prompt_ids", "response_ids", "loss_mask", "response_logprobs")] == \
        ["<i4", "<i4", "|u1", "<f4"]
    # an id past int32 widens; a mask weight and a logprob float32 cannot hold exactly too
    assert [wide[k]["dtype"] for k in ("prompt_ids", "response_ids", "loss_mask", "response_logprobs")] == \
        ["<i8", "<u8", "<f4", "<f8"]
    assert signed["loss_mask"]["dtype"] == "<f4"  # -0.0 is not a 0/1 flag: its sign survives
    assert "response_tokens" not in plain  # token strings travel only when an engine gave some


def test_the_compact_layout_picks_the_smallest_exact_encoding():
    f32 = float.fromhex("-0x1.8p-3")
    run = [0.0] * 50 + [1.0] * 20 + [0.0] * 30  # a merged trace: few long runs
    flicker = [float(i % 2) for i in range(100)]  # runs would cost more than bits
    small_vocab = encode_result(result(trace([1, 2], list(range(100)), run, [f32 if m else 0.0 for m in run])))
    [t] = unpack(small_vocab)["trajectory"]["traces"]
    assert (t["prompt_ids"]["dtype"], t["response_ids"]["dtype"]) == ("<u2", "<u2")
    assert (t["loss_mask"]["dtype"], t["loss_mask"]["count"]) == ("runs", 3)  # 50 zeros, 20 ones, 30 zeros
    lp = t["response_logprobs"]
    assert (lp["dtype"], lp["count"], lp["fill"]) == ("<f4", 20, b"\0\0\0\0")  # only the sampled ones
    vocab = encode_result(result(trace([151_935], [100_000 + i for i in range(100)], flicker,
                                       [f32 if m else 0.0 for m in flicker])))
    [t] = unpack(vocab)["trajectory"]["traces"]
    assert (t["response_ids"]["dtype"], t["loss_mask"]["dtype"], t["loss_mask"]["count"]) == ("u3", "bits", 100)
    # Masked tokens with logprobs of their own, a weighted mask, ids past 2^24: stored whole, as in version 2.
    mixed = encode_result(result(trace([1], [2, 3, 4], [1.0, 0.0, 0.0], [f32, -0.1, -0.2]),
                                 trace([2**30], [5], [0.5], [f32])))
    first, second = unpack(mixed)["trajectory"]["traces"]
    assert "fill" not in first["response_logprobs"] and first["response_logprobs"]["count"] == 3
    assert (second["loss_mask"]["dtype"], second["prompt_ids"]["dtype"]) == ("<f4", "<i4")


def test_a_first_sampled_token_starts_the_runs_with_an_empty_run_of_zeros():
    blob = encode_result(result(trace([1], [2, 3, 4], [1.0, 1.0, 0.0], [-0.1, -0.2, 0.0])))
    assert refs(blob)["loss_mask"]["count"] == 3  # 0 zeros, 2 ones, 1 zero
    [t] = decode_arrays(blob).traces
    assert t.loss_mask.tolist() == [1, 1, 0] and t.response_logprobs.dtype == np.float64


def test_arrays_start_8_aligned_in_the_blob():
    blob = encode_result(result(trace([1, 2, 3], [4], [1.0], [-0.5]), trace([9], [8, 7], logprobs=[-0.1, -0.2])),
                         layout="aligned")
    head = blob.index(b"\xc6") + 5  # the arrays bin32 follows "arrays" at the start
    for t in unpack(blob)["trajectory"]["traces"]:
        for key in ("loss_mask", "response_logprobs"):
            assert (head + t[key]["offset"]) % 8 == 0


def test_the_encoder_refuses_logprobs_naming_other_ids():
    bad = Trace.model_construct(prompt_ids=[1], response_ids=[2], loss_mask=[1.0],
                                response_logprobs=[TokenLogprob(token_id=3, logprob=-0.1)])
    with pytest.raises(BlobFormatError, match="token_id"):
        encode_trajectory(Trajectory.model_construct(traces=[bad], metadata={}, error=None))


# --- versions ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(v1_cases.CASES) + sorted(v1_cases.V2_CASES))
def test_fixtures_written_before_the_change_still_decode(name):
    blob = (v1_cases.HERE / name).read_bytes()
    expected = {**v1_cases.CASES, **v1_cases.V2_CASES}[name]()
    if isinstance(expected, Trajectory):
        assert same(decode_trajectory(blob), expected)
        return
    version = int(name[1])
    if version == 2:  # written by the version-2 encoder, with every field the schema has now
        assert same(decode_result(blob), expected) and decode_arrays(blob).version == 2
        assert encode_result(expected, layout="aligned") == blob  # the aligned layout is still version 2
        return
    assert same(decode_result(blob), expected)
    assert summary_from_blob(blob) == expected.summary()
    arrays = decode_arrays(blob)
    assert arrays.version == 1 and arrays.session_id == expected.session_id
    again = decode_arrays(encode_result(expected, layout="aligned"))
    # Fields added to the schema since (node_id, Polar's timing names) are absent from the old blob.
    added: list = []
    assert again.version == 2 and arrays.fields == _without_added(again.fields, arrays.fields, added)
    assert set(added) <= ADDED_SINCE_V1, added
    for old, new in zip(arrays.traces, again.traces):
        for key in ("prompt_ids", "response_ids", "loss_mask", "response_logprobs"):
            a, b = getattr(old, key), getattr(new, key)
            assert a.dtype == b.dtype and _bits(a.tolist()) == _bits(b.tolist()) if a.dtype.kind == "f" \
                else a.tolist() == b.tolist()
        assert old.response_tokens == new.response_tokens and old.fields == new.fields


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_generic_msgpack_reader_and_the_schema_read_versions_2_and_3_too(layout):
    r = v1_cases.multi_trace_result()
    blob = encode_result(r, layout)
    assert same(SessionResult.model_validate(unpack(blob)), r)  # what `polar verify --file` does
    assert same(SessionResult.model_validate(msgpack.unpackb(blob)), r)
    assert same(Trajectory.model_validate(unpack(encode_trajectory(r.trajectory, layout))), r.trajectory)
    # another writer's key order: no fixed start to map, but still the same version and still exact
    data = unpack(blob)
    reordered = msgpack.packb({k: data[k] for k in reversed(list(data))}, use_bin_type=True)
    assert same(decode_result(reordered), r)
    arrays = decode_arrays(reordered)
    assert arrays.version == LAYOUTS[layout] and [t.response_ids.tolist() for t in arrays.traces] == \
        [t.response_ids for t in r.trajectory.traces]


def test_version_dispatch_refuses_unknown_versions():
    blob = encode_result(result(trace([1], [2])))
    newer = blob.replace(pack("blob_version") + pack(3), pack("blob_version") + pack(4), 1)
    for decode in (decode_result, decode_arrays):
        with pytest.raises(BlobFormatError, match="blob_version 4"):
            decode(newer)
    with pytest.raises(ValidationError, match="blob_version 4"):
        SessionResult.model_validate(unpack(newer))
    with pytest.raises(BlobFormatError, match="unknown blob layout"):
        encode_result(result(trace([1], [2])), layout="tight")


@pytest.mark.parametrize("blob, message", [
    (b"", "msgpack map"),
    (msgpack.packb([1, 2]), "msgpack map"),
    (msgpack.packb({"blob_version": 2, "session_id": "s"}), '"arrays"'),
    (msgpack.packb({"blob_version": 300}), "unreadable blob_version"),
])
def test_malformed_blobs_are_refused_by_name(blob, message):
    with pytest.raises(BlobFormatError, match=message):
        decode_arrays(blob)


def test_compact_references_that_disagree_with_the_response_are_refused():
    blob = encode_result(result(trace([1], [2, 3, 4], [0.0, 1.0, 0.0], [0.0, -0.5, 0.0])))
    data = unpack(blob)
    t = data["trajectory"]["traces"][0]
    t["response_ids"]["count"] = 2  # the mask (bits here) now covers more tokens than the response has
    with pytest.raises(ValidationError, match="loss mask of 3 tokens for a response of 2"):
        SessionResult.model_validate(data)
    data = unpack(blob)
    data["trajectory"]["traces"][0]["response_logprobs"]["fill"] = b"\0\0"
    with pytest.raises(ValidationError, match="fill of 2 bytes"):
        SessionResult.model_validate(data)


def test_truncated_blobs_and_stray_references_are_refused():
    blob = encode_result(result(trace([1, 2, 3], [4, 5])))
    for cut in (len(blob) - 3, 40, 30):
        with pytest.raises(BlobFormatError, match="truncated"):
            decode_arrays(blob[:cut])
    data = unpack(blob)
    data["trajectory"]["traces"][0]["response_ids"]["count"] = 10**6
    with pytest.raises(ValidationError, match="outside the arrays"):
        SessionResult.model_validate(data)
    data["trajectory"]["traces"][0]["response_ids"] = {"dtype": "<c16", "offset": 0, "count": 1}
    with pytest.raises(ValidationError, match="unknown array dtype"):
        SessionResult.model_validate(data)


def test_summary_from_the_arrays_equals_the_models_summary():
    r = result(trace([1, 2], [3, 4, 5], [1.0, 0.0, 1.0]), trace([6], [7], [0.0]), reward=0.0)
    assert summary_from_blob(encode_result(r)) == r.summary()
    assert summary_from_blob(encode_result(r)).trainable_tokens == 2
