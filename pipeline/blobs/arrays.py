"""A result blob as numpy arrays, for trainers: each trace's ids, loss mask and logprobs are
read-only views into the blob (no copy, no per-token Python object), the rest plain data.

    arrays = decode_arrays(blob)           # or delivery.arrays from RolloutClient.results()
    for t in arrays.traces:
        t.prompt_ids, t.response_ids       # int32 (int64/uint64 only if an id needs it)
        t.loss_mask                        # uint8 0/1 (float32/float64 if a builder weighted tokens)
        t.response_logprobs                # float32 (float64 if a value is not exactly a float32)
        t.response_tokens                  # per-token strings or None, decoded on first access

The views keep the blob alive and cannot be written (``np.array(view)`` for a copy). A
version-1 blob decodes too, into fresh arrays of the same dtypes (that path copies).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any, Callable

import numpy as np

from pipeline.blobs.layout import (
    BLOB_VERSION,
    NESTED,
    PACKED_FIELDS,
    TOKENS_FIELD,
    VERSION_KEY,
    Frame,
    pack_floats,
    pack_ints,
    plain_from_unpacked,
    read_frame,
    traces_of,
)
from pipeline.codec import unpack
from pipeline.errors import BlobFormatError


@dataclass(frozen=True, eq=False)
class TraceArrays:
    prompt_ids: np.ndarray
    response_ids: np.ndarray
    loss_mask: np.ndarray
    response_logprobs: np.ndarray
    fields: dict[str, Any]  # the trace's other fields (messages, tools, finish_reason, reward, metadata)
    _load_tokens: Callable[[], list[str | None] | None] = field(repr=False)

    @cached_property
    def response_tokens(self) -> list[str | None] | None:
        """The engine's per-token strings; None when it returned none (decoded only when asked:
        a million strings cost more than all the arrays together)."""
        return self._load_tokens()


@dataclass(frozen=True, eq=False)
class ResultArrays:
    version: int  # the blob's format version
    fields: dict[str, Any]  # the SessionResult's other fields as JSON-like data (traces left out)
    traces: list[TraceArrays]

    @property
    def session_id(self) -> str:
        return self.fields["session_id"]

    @property
    def task_id(self) -> str:
        return self.fields["task_id"]

    @property
    def status(self) -> str:
        return self.fields["status"]

    @property
    def reward(self) -> float | None:
        return self.fields.get("reward")

    @property
    def sample_index(self) -> int:
        return self.fields.get("sample_index", 0)


def decode_arrays(blob: bytes) -> ResultArrays:
    frame = read_frame(blob)
    if frame is None:
        data = unpack(blob)
        if VERSION_KEY in data:  # version 2 from a writer that put its entries in another order
            return _from_plain(plain_from_unpacked(data), BLOB_VERSION)
        return _from_plain(data, 1)
    try:
        traces = [_trace_views(t, frame) for t in traces_of(frame.fields)]
    except KeyError as exc:
        raise BlobFormatError(f"a version-2 trace lacks {exc}") from None
    return ResultArrays(frame.version, _without_traces(frame.fields), traces)


def _trace_views(trace: dict[str, Any], frame: Frame) -> TraceArrays:
    tokens_ref = trace.get(TOKENS_FIELD)
    return TraceArrays(
        prompt_ids=_ids(frame.values(trace["prompt_ids"])),
        response_ids=_ids(frame.values(trace["response_ids"])),
        loss_mask=frame.view(trace["loss_mask"]),
        response_logprobs=frame.view(trace["response_logprobs"]),
        fields=_rest(trace),
        _load_tokens=(lambda: None) if tokens_ref is None else (lambda: frame.nested(tokens_ref)),
    )


def _ids(values: np.ndarray | list[Any]) -> np.ndarray:
    """Ids beyond 64 bits (kept as a nested list) become an object array of Python ints."""
    return values if isinstance(values, np.ndarray) else _object_ints(values)


def _from_plain(data: dict[str, Any], version: int) -> ResultArrays:
    """Fresh arrays from version-1 shaped data, of the dtypes version 2 would have given."""
    traces = []
    for t in traces_of(data):
        entries = t.get("response_logprobs") or []
        tokens = [e.get("token") for e in entries]
        traces.append(TraceArrays(
            prompt_ids=_array(*pack_ints(_ints(t.get("prompt_ids") or []))),
            response_ids=_array(*pack_ints(_ints(t.get("response_ids") or []))),
            loss_mask=_array(*pack_floats(t.get("loss_mask") or [], flags=True)),
            response_logprobs=_array(*pack_floats([e["logprob"] for e in entries])),
            fields=_rest(t),
            _load_tokens=partial(_if_any, tokens),
        ))
    return ResultArrays(version, _without_traces(data), traces)


def _if_any(tokens: list[str | None]) -> list[str | None] | None:
    return None if tokens.count(None) == len(tokens) else tokens


def _array(dtype: str, data: bytes) -> np.ndarray:
    return _object_ints(unpack(data)) if dtype == NESTED else np.frombuffer(data, dtype=dtype)


def _ints(values: list[Any]) -> list[int]:
    # Version 1 stored ids msgpack cannot hold as decimal text.
    return [int(v) for v in values] if any(isinstance(v, str) for v in values) else values


def _object_ints(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [int(v) for v in values]
    return out


def _rest(trace: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in trace.items() if k not in PACKED_FIELDS and k != TOKENS_FIELD}


def _without_traces(fields: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in fields.items() if k != "traces"}
    if isinstance(out.get("trajectory"), dict):
        out["trajectory"] = {k: v for k, v in out["trajectory"].items() if k != "traces"}
    return out
