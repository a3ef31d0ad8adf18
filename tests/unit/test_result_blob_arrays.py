"""The numpy side of result blobs: views into the blob (no copy) where arrays are stored plain,
exact expansion where the compact layout stores them smaller, lazily decoded token strings,
shared prompt bytes of per_request traces, and the size of a 1M-token trace in each layout."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.blobs import LAYOUTS, decode_arrays, decode_result, encode_result
from pipeline.blobs.layout import TraceColumns, write_blob
from pipeline.codec import pack, unpack
from tests.unit.test_result_blobs import result, trace


def test_aligned_arrays_are_read_only_aligned_views_of_the_blob():
    blob = encode_result(result(trace([1, 2, 3], [4, 5], [1.0, 0.0], [-0.5, 0.0]), trace([6], [7, 8])),
                         layout="aligned")
    whole = np.frombuffer(blob, np.uint8)
    for t in decode_arrays(blob).traces:
        for a in (t.prompt_ids, t.response_ids, t.loss_mask, t.response_logprobs):
            assert a.base is blob and np.shares_memory(a, whole)  # no copy: the blob's own bytes
            assert not a.flags.writeable and a.flags.aligned
    first = decode_arrays(blob).traces[0]
    assert first.response_ids.dtype == np.int32 and first.loss_mask.dtype == np.uint8
    assert first.response_logprobs.dtype == np.float32 and first.loss_mask.tolist() == [1, 0]


def test_compact_arrays_are_views_where_stored_plain_and_exact_copies_elsewhere():
    mask = [0.0] * 3 + [1.0] * 4 + [0.0] * 3
    logprobs = [-0.5 if m else 0.0 for m in mask]
    small = encode_result(result(trace([1, 2, 3], list(range(10)), mask, logprobs)))
    whole = np.frombuffer(small, np.uint8)
    [t] = decode_arrays(small).traces
    assert t.prompt_ids.dtype == np.uint16 and np.shares_memory(t.prompt_ids, whole)  # a view
    assert np.shares_memory(t.sampled_logprobs, whole) and t.sampled_logprobs.tolist() == [-0.5] * 4
    assert not np.shares_memory(t.response_logprobs, whole) and t.response_logprobs.tolist() == logprobs
    assert t.loss_mask.dtype == np.uint8 and t.loss_mask.tolist() == mask
    big = encode_result(result(trace([151_000], [151_935, 70_000, 0], [1.0, 1.0, 1.0], [-0.1, -0.2, -0.3])))
    [t] = decode_arrays(big).traces
    assert t.response_ids.dtype == np.int32 and t.response_ids.tolist() == [151_935, 70_000, 0]
    assert t.prompt_ids.tolist() == [151_000]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_views_also_work_on_a_memoryview_or_bytearray(layout):
    blob = encode_result(result(trace([1, 2], [3])), layout)
    for buffer in (memoryview(blob), bytearray(blob)):
        [t] = decode_arrays(buffer).traces
        assert t.prompt_ids.tolist() == [1, 2] and np.shares_memory(t.prompt_ids, np.frombuffer(buffer, np.uint8))


def test_token_strings_are_decoded_only_when_asked(monkeypatch):
    from pipeline.blobs import layout

    blob = encode_result(result(trace([1], [2, 3], tokens=["x", None]), trace([1], [4])))
    calls = []
    nested = layout.Frame.nested
    monkeypatch.setattr(layout.Frame, "nested", lambda self, ref: calls.append(ref) or nested(self, ref))
    with_tokens, without = decode_arrays(blob).traces
    assert calls == []
    assert with_tokens.response_tokens == ["x", None] and without.response_tokens is None
    assert len(calls) == 1


def test_result_fields_travel_beside_the_arrays():
    r = result(trace([1], [2], finish_reason="stop", reward=0.25, metadata={"turns": []},
                     response_messages=[{"role": "assistant", "content": "ok"}]), reward=0.25)
    arrays = decode_arrays(encode_result(r))
    assert (arrays.session_id, arrays.task_id, arrays.status, arrays.reward) == ("sess-1", "task-1", "COMPLETED", 0.25)
    assert "traces" not in arrays.fields["trajectory"]
    [t] = arrays.traces
    assert t.fields == {"prompt_messages": [], "response_messages": [{"role": "assistant", "content": "ok"}],
                        "tools": None, "finish_reason": "stop", "reward": 0.25, "metadata": {"turns": []}}


def conversation(turns: int, interleave: bool = False):
    """per_request traces of one conversation: each prompt is the previous one, its response and a
    tool output (optionally interleaved with a second conversation, as a sub-agent's calls are)."""
    rng = np.random.default_rng(1)
    histories = [rng.integers(0, 150_000, 300).tolist() for _ in range(2 if interleave else 1)]
    out = []
    for _ in range(turns):
        for h in histories:
            response = rng.integers(0, 150_000, 40).tolist()
            out.append(trace(list(h), response, logprobs=(-rng.random(40)).astype(np.float32).tolist()))
            h += response + rng.integers(0, 150_000, 60).tolist()
    return result(*out)


@pytest.mark.parametrize("layout, id_bytes", [("aligned", 4), ("compact", 3)])
def test_a_growing_conversations_prompts_and_responses_are_stored_once(layout, id_bytes):
    r = conversation(turns=20)
    blob = encode_result(r, layout)
    traces = unpack(blob)["trajectory"]["traces"]
    last = traces[-1]["prompt_ids"]
    # every prompt is a prefix of the last one's bytes; each response sits inside the next prompt
    assert all(t["prompt_ids"]["offset"] == last["offset"] for t in traces)
    assert all(t["response_ids"]["offset"] < last["offset"] + id_bytes * last["count"] for t in traces[:-1])
    ids_in_traces = sum(len(t.prompt_ids) + len(t.response_ids) for t in r.trajectory.traces)
    assert len(blob) < ids_in_traces  # under a byte per token, where each is 4 bytes on its own
    assert pack(decode_result(blob)) == pack(r)
    for t, arrays in zip(r.trajectory.traces, decode_arrays(blob).traces):
        assert arrays.prompt_ids.tolist() == t.prompt_ids and arrays.response_ids.tolist() == t.response_ids


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_interleaved_conversations_still_decode_exactly(layout):
    r = conversation(turns=5, interleave=True)
    blob = encode_result(r, layout)
    assert pack(decode_result(blob)) == pack(r)
    assert [a.prompt_ids.tolist() for a in decode_arrays(blob).traces] == [t.prompt_ids for t in r.trajectory.traces]


def merged_columns(n: int, seed: int = 0) -> tuple[list[int], list[float], list[float]]:
    """A merged trace's response: sampled turns (mask 1, real logprobs) between tool outputs
    (mask 0, the builder's 0.0), about 1 : 2, over a 152k vocabulary."""
    rng = np.random.default_rng(seed)
    runs = rng.integers(100, 1000, n // 200)
    flags = np.repeat(np.arange(runs.size) % 3 == 1, runs)[:n]
    flags = np.concatenate([flags, np.zeros(n - flags.size, bool)])
    logprobs = np.where(flags, -rng.exponential(0.3, n).astype(np.float32), 0.0)
    return rng.integers(0, 151_936, n).tolist(), flags.astype(np.float64).tolist(), logprobs.tolist()


@pytest.mark.parametrize("layout, at_most", [("aligned", 9.01), ("compact", 4.5)])
def test_a_million_token_merged_trace_size_in_each_layout(layout, at_most):
    """Decode times are measured in bench/blob_bench.py; here, the sizes and exactness."""
    n = 1_000_000
    response, mask, logprobs = merged_columns(n)
    # Written from columns: a million TokenLogprob models would take seconds to build.
    fields = {"session_id": "s", "task_id": "t", "status": "COMPLETED",
              "trajectory": {"status": "COMPLETED", "metadata": {}, "error": None}}
    blob = write_blob(fields, [TraceColumns([], response, mask, logprobs, [None] * n, {})], layout)
    assert len(blob) / n <= at_most  # aligned: int32 id + float32 logprob + a mask byte
    [t] = decode_arrays(blob).traces
    assert t.response_ids.tolist() == response and t.response_logprobs.tolist() == logprobs
    assert t.loss_mask.tolist() == mask
    whole = np.frombuffer(blob, np.uint8)
    if layout == "aligned":
        assert all(np.shares_memory(a, whole) for a in (t.response_ids, t.response_logprobs))
        assert fields["trajectory"]["traces"][0]["loss_mask"]["dtype"] == "|u1"
    else:
        assert np.shares_memory(t.sampled_logprobs, whole)
        assert fields["trajectory"]["traces"][0]["loss_mask"]["dtype"] == "runs"


def test_mask_runs_that_do_not_cover_the_response_are_refused():
    from pydantic import ValidationError

    from pipeline.schemas import SessionResult

    blob = encode_result(result(trace([1], list(range(200)), [0.0] * 100 + [1.0] * 100, [0.0] * 100 + [-0.5] * 100)))
    data = unpack(blob)
    assert data["trajectory"]["traces"][0]["loss_mask"]["dtype"] == "runs"
    data["trajectory"]["traces"][0]["response_ids"]["count"] = 150
    with pytest.raises(ValidationError, match="runs cover 200 tokens, the response 150"):
        SessionResult.model_validate(data)

