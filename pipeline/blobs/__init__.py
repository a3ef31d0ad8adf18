"""Result and trajectory blobs: the versioned msgpack format of the results stream and the
output store (docs/result-blobs.md). Version 2 ("aligned") carries each trace's token ids, loss
mask and logprobs as packed little-endian arrays that a trainer reads as numpy views; version 3
("compact", the default) may store them smaller (3-byte ids, run-length masks, logprobs of
sampled tokens only). ``decode_arrays`` gives numpy arrays of any version; ``decode_result`` the
pydantic ``SessionResult``, version-1 blobs (the pydantic dump, msgpack-packed) included.

``layout`` is the byte format and knows no schema, ``compact`` its smaller encodings, ``plain``
the version-1 shaped data the schemas validate; ``arrays`` the numpy reader; ``models`` the
pydantic encoders and decoders.
"""

from pipeline.blobs.arrays import ResultArrays, TraceArrays, decode_arrays
from pipeline.blobs.layout import BLOB_VERSION, LAYOUTS
from pipeline.blobs.models import (
    decode_result,
    decode_trajectory,
    encode_result,
    encode_trajectory,
    summary_from_blob,
)

__all__ = [
    "BLOB_VERSION", "LAYOUTS", "ResultArrays", "TraceArrays", "decode_arrays", "decode_result", "decode_trajectory",
    "encode_result", "encode_trajectory", "summary_from_blob",
]
