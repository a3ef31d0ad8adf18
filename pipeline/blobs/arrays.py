"""A result blob as numpy arrays, for trainers: each trace's ids, loss mask and logprobs, without
a per-token Python object; the rest plain data.

    arrays = decode_arrays(blob)           # or delivery.arrays from RolloutClient.results()
    for t in arrays.traces:
        t.prompt_ids, t.response_ids       # uint16 or int32 (int64/uint64 only if an id needs it)
        t.loss_mask                        # uint8 0/1 (float32/float64 if a builder weighted tokens)
        t.response_logprobs                # float32 (float64 if a value is not exactly a float32)
        t.sampled_logprobs                 # the same, only where the loss mask is not 0
        t.response_tokens                  # per-token strings or None

Each array is made when first read. Arrays stored plain (every array of a version-2 blob;
uint16 ids and the sampled logprobs of a version-3 blob) are read-only views into the blob: no
copy (``np.array(view)`` for one); they keep the blob alive. What version 3 stores smaller
(3-byte ids, run-length or bit masks, logprobs of sampled tokens only) is expanded into fresh
arrays, a few milliseconds per million tokens. A version-1 blob decodes into fresh arrays of
version 2's dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any, Callable

import numpy as np

from pipeline.blobs.layout import (
    NESTED,
    PACKED_FIELDS,
    TOKENS_FIELD,
    VERSION_KEY,
    Frame,
    pack_floats,
    pack_ints,
    read_frame,
)
from pipeline.blobs.plain import plain_from_unpacked, traces_of
from pipeline.codec import unpack
from pipeline.errors import BlobFormatError


class TraceArrays:
    """One trace's token arrays, each made from the blob when first read."""

    def __init__(self, fields: dict[str, Any], load: dict[str, Callable[[], Any]]) -> None:
        self.fields = fields  # the trace's other fields (messages, tools, finish_reason, reward, metadata)
        self._load = load

    def __repr__(self) -> str:
        return f"TraceArrays(fields={sorted(self.fields)})"

    @cached_property
    def prompt_ids(self) -> np.ndarray:
        return self._load["prompt_ids"]()

    @cached_property
    def response_ids(self) -> np.ndarray:
        return self._load["response_ids"]()

    @cached_property
    def loss_mask(self) -> np.ndarray:
        return self._load["loss_mask"]()

    @cached_property
    def response_logprobs(self) -> np.ndarray:
        return self._load["response_logprobs"]()

    @cached_property
    def sampled_logprobs(self) -> np.ndarray:
        """The logprobs of the tokens whose loss mask is not 0, in order (what a policy-gradient
        loss reads; a view when the blob stores only those)."""
        load = self._load.get("sampled_logprobs")
        return load() if load else self.response_logprobs[self.loss_mask != 0]

    @cached_property
    def response_tokens(self) -> list[str | None] | None:
        """The engine's per-token strings; None when it returned none (decoded only when asked:
        a million strings cost more than all the arrays together)."""
        return self._load["response_tokens"]()


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

    def read_all(self) -> "ResultArrays":
        """Read every array of every trace now (each is kept): what proves a blob decodes,
        since arrays are otherwise made only when first read."""
        for t in self.traces:
            for name in ("prompt_ids", "response_ids", "loss_mask", "response_logprobs", "sampled_logprobs"):
                getattr(t, name)
        return self


def decode_arrays(blob: bytes) -> ResultArrays:
    frame = read_frame(blob)
    if frame is None:
        data = unpack(blob)
        if VERSION_KEY in data:  # version 2 or 3 from a writer that put its entries in another order
            return _from_plain(plain_from_unpacked(data), data[VERSION_KEY])
        return _from_plain(data, 1)
    try:
        traces = [_trace_views(t, frame) for t in traces_of(frame.fields)]
    except KeyError as exc:
        raise BlobFormatError(f"a version-{frame.version} trace lacks {exc}") from None
    return ResultArrays(frame.version, _without_traces(frame.fields), traces)


def _trace_views(trace: dict[str, Any], frame: Frame) -> TraceArrays:
    refs = {k: trace[k] for k in PACKED_FIELDS}  # a missing one is a KeyError, named by the caller
    tokens_ref = trace.get(TOKENS_FIELD)
    out: TraceArrays  # the loaders below read its other arrays (the mask needs the response's length)
    load: dict[str, Callable[[], Any]] = {
        "prompt_ids": lambda: _ids(frame.ids(refs["prompt_ids"])),
        "response_ids": lambda: _ids(frame.ids(refs["response_ids"])),
        "loss_mask": lambda: frame.mask(refs["loss_mask"], len(out.response_ids)),
        "response_logprobs": lambda: frame.logprobs(refs["response_logprobs"], out.loss_mask),
        "response_tokens": (lambda: None) if tokens_ref is None else (lambda: frame.nested(tokens_ref)),
    }
    if "fill" in refs["response_logprobs"]:  # only the sampled tokens' logprobs are stored: a view
        load["sampled_logprobs"] = lambda: frame.view(refs["response_logprobs"])
    out = TraceArrays(_rest(trace), load)
    return out


def _ids(values: np.ndarray | list[Any]) -> np.ndarray:
    """Ids beyond 64 bits (kept as a nested list) become an object array of Python ints."""
    return values if isinstance(values, np.ndarray) else _object_ints(values)


def _from_plain(data: dict[str, Any], version: int) -> ResultArrays:
    """Fresh arrays from version-1 shaped data, of the dtypes version 2 would have given."""
    traces = []
    for t in traces_of(data):
        entries = t.get("response_logprobs") or []
        tokens = [e.get("token") for e in entries]
        traces.append(TraceArrays(_rest(t), {
            "prompt_ids": partial(_array, *pack_ints(_ints(t.get("prompt_ids") or []))),
            "response_ids": partial(_array, *pack_ints(_ints(t.get("response_ids") or []))),
            "loss_mask": partial(_array, *pack_floats(t.get("loss_mask") or [], flags=True)),
            "response_logprobs": partial(_array, *pack_floats([e["logprob"] for e in entries])),
            "response_tokens": partial(_if_any, tokens),
        }))
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
