"""Results and trajectories to and from blobs, as pydantic models: what the stages, the API and
``RolloutClient`` deliveries' ``.result`` use. Trainers that want tensors read ``arrays.py``."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import numpy as np

from pipeline.blobs.arrays import decode_arrays
from pipeline.blobs.layout import PACKED_FIELDS, TraceColumns, read_frame, write_blob
from pipeline.blobs.plain import plain_fields
from pipeline.codec import unpack
from pipeline.collector import collector_paused
from pipeline.errors import BlobFormatError
from pipeline.schemas import SessionResult, SessionSummary, Trace, Trajectory

_TOKEN_ID, _LOGPROB, _TOKEN = attrgetter("token_id"), attrgetter("logprob"), attrgetter("token")


def encode_result(result: SessionResult, layout: str = "compact") -> bytes:
    """The blob of ``result`` (the format of ``docs/result-blobs.md``): ``layout`` "compact"
    (version 3, the smallest exact encoding) or "aligned" (version 2, every array read in place)."""
    fields = result.model_dump(mode="json", exclude={"trajectory": {"traces"}})
    return write_blob(fields, [_columns(t) for t in result.trajectory.traces], layout)


def encode_trajectory(trajectory: Trajectory, layout: str = "compact") -> bytes:
    """A trajectory (POSTRUN's output, EVALUATE's input) in the same format."""
    fields = trajectory.model_dump(mode="json", exclude={"traces"})
    return write_blob(fields, [_columns(t) for t in trajectory.traces], layout)


def decode_result(blob: bytes) -> SessionResult:
    """A ``SessionResult`` from a blob of any version (version 1: the pydantic dump packed)."""
    with collector_paused():
        return SessionResult.model_validate(_plain(blob))


def decode_trajectory(blob: bytes) -> Trajectory:
    with collector_paused():
        return Trajectory.model_validate(_plain(blob))


def summary_from_blob(blob: bytes) -> SessionSummary:
    """The summary of a stored result without building its traces (what progress polling
    needs): token counts come from the arrays."""
    arrays = decode_arrays(blob)
    head = SessionResult.model_validate(arrays.fields)  # the trajectory's traces are left out
    return head.summary().model_copy(update={
        "num_traces": len(arrays.traces),
        "prompt_tokens": sum(t.prompt_ids.size for t in arrays.traces),
        "response_tokens": sum(t.response_ids.size for t in arrays.traces),
        "trainable_tokens": sum(int(np.count_nonzero(t.loss_mask)) for t in arrays.traces),
    })


def _plain(blob: bytes) -> Any:
    frame = read_frame(blob)
    # Version 1, or a version-2 blob whose entries another writer ordered differently: the
    # schemas' own validator turns an unpacked version-2 blob into the version-1 shape.
    return unpack(blob) if frame is None else plain_fields(frame)


def _columns(trace: Trace) -> TraceColumns:
    entries = trace.response_logprobs
    # Blobs keep token ids once; a trace whose logprob entries name other ids than its
    # response (only possible through model_construct) would not validate on decode either.
    if list(map(_TOKEN_ID, entries)) != list(trace.response_ids):
        raise BlobFormatError("response_logprobs[i].token_id must equal response_ids[i] for every token")
    return TraceColumns(trace.prompt_ids, trace.response_ids, trace.loss_mask, list(map(_LOGPROB, entries)),
                        list(map(_TOKEN, entries)), trace.model_dump(mode="json", exclude=set(PACKED_FIELDS)))
