"""Version-2 and -3 blobs as plain data of the version-1 shape (lists, ``TokenLogprob`` maps):
what the pydantic schemas validate. Knows no schema class, so the schemas themselves can call it."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.blobs.layout import ARRAYS_KEY, PACKED_FIELDS, TOKENS_FIELD, VERSION_KEY, Frame, check_version
from pipeline.errors import BlobFormatError


def traces_of(fields: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace list of a result's fields (under ``trajectory``) or a trajectory's."""
    holder = fields.get("trajectory") if "trajectory" in fields else fields
    traces = holder.get("traces") if isinstance(holder, dict) else None
    return traces if isinstance(traces, list) else []


def plain_trace(trace: dict[str, Any], frame: Frame) -> dict[str, Any]:
    missing = [k for k in PACKED_FIELDS if k not in trace]
    if missing:
        raise BlobFormatError(f"a version-{frame.version} trace lacks {missing}")
    response_ids = frame.ids(trace["response_ids"])
    mask = frame.mask(trace["loss_mask"], len(response_ids))
    response = _as_list(response_ids)
    logprobs = _as_floats(frame.logprobs(trace["response_logprobs"], mask))
    tokens = frame.nested(trace[TOKENS_FIELD]) if TOKENS_FIELD in trace else None
    rest = {k: v for k, v in trace.items() if k not in PACKED_FIELDS and k != TOKENS_FIELD}
    return {
        "prompt_ids": _as_list(frame.ids(trace["prompt_ids"])),
        "response_ids": response,
        "loss_mask": _as_floats(mask),
        "response_logprobs": [{"token_id": t, "logprob": lp, "token": s}
                              for t, lp, s in zip(response, logprobs, tokens or [None] * len(response))],
        **rest,
    }


def plain_fields(frame: Frame) -> dict[str, Any]:
    """The frame's fields with every trace in the version-1 shape."""
    fields = dict(frame.fields)
    plain = [plain_trace(t, frame) for t in traces_of(fields)]
    if "trajectory" in fields:
        fields["trajectory"] = {**fields["trajectory"], "traces": plain}
    else:
        fields["traces"] = plain
    return fields


def plain_from_unpacked(data: dict[str, Any]) -> dict[str, Any]:
    """A version-2 or -3 blob already unpacked by a generic msgpack reader (the arrays bin a
    bytes value) in the version-1 shape: what lets ``SessionResult.model_validate(unpack(blob))``
    work on any version."""
    version: Any = data.get(VERSION_KEY)
    check_version(version)
    arrays = data.get(ARRAYS_KEY)
    if not isinstance(arrays, (bytes, bytearray, memoryview)):
        raise BlobFormatError(f'a version-{version} blob needs its "arrays" bin')
    fields = {k: v for k, v in data.items() if k not in (VERSION_KEY, ARRAYS_KEY)}
    return plain_fields(Frame(version, fields, arrays, 0, len(arrays)))


def _as_list(values: np.ndarray | list[Any]) -> list[Any]:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def _as_floats(values: np.ndarray | list[Any]) -> list[float]:
    return np.asarray(values, dtype=np.float64).tolist()
