"""Result and trajectory blobs: the versioned msgpack format of the results stream and the
output store (docs/result-blobs.md). Version 2 carries each trace's token ids, loss mask and
logprobs as packed little-endian arrays that a trainer reads as numpy views
(``decode_arrays``); ``decode_result`` gives the pydantic ``SessionResult`` and reads version-1
blobs (the pydantic dump, msgpack-packed) as well.

``layout`` is the byte format and knows no schema; ``arrays`` the numpy reader; ``models`` the
pydantic encoders and decoders.
"""

from pipeline.blobs.arrays import ResultArrays, TraceArrays, decode_arrays
from pipeline.blobs.layout import BLOB_VERSION
from pipeline.blobs.models import (
    decode_result,
    decode_trajectory,
    encode_result,
    encode_trajectory,
    summary_from_blob,
)

__all__ = [
    "BLOB_VERSION", "ResultArrays", "TraceArrays", "decode_arrays", "decode_result", "decode_trajectory",
    "encode_result", "encode_trajectory", "summary_from_blob",
]
