"""The digest of what an update *does*: its decoded (index, value) pairs, not its bytes.

The signed payload digest (docs/wire-format.md §7) is over the canonical tensors, so an update
re-encoded in the other format or with another Rice k keeps it. It still tells apart files that
decode to the very same float32 values: the codebook doubled and every chunk scale halved, two
codebook entries swapped with their codes, an entry no code uses changed, the codes of a chunk whose
scale is 0. Each of those re-signed an old update as new (`duplicate_payload` compared the payload
digest only). This digest is over the decoded values themselves, the zeros left out (a zero adds
nothing, and −0 equals +0), so every such re-encoding has the digest of the update it repeats.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np
import torch

from scoring.types import SparseParam


def param_digest(name: str, param: SparseParam) -> bytes:
    """SHA-256 over the parameter's name, shape and its non-zero (index, value) pairs by index."""
    idx, values = param.indices, param.values.to(torch.float32)
    zero = values == 0.0
    if bool(zero.any()):
        idx, values = idx[~zero], values[~zero]
    # The decoder emits indices ascending (chunk by chunk, strictly increasing within one), so the
    # sort, the dearest step, runs only for a caller that built a parameter in another order.
    if idx.numel() > 1 and not bool((idx[1:] > idx[:-1]).all()):
        idx, order = torch.sort(idx)
        values = values[order]
    h = hashlib.sha256()
    h.update(name.encode() + b"\0" + ",".join(str(d) for d in param.shape).encode() + b"\0")
    for arr, dtype in ((idx.to(torch.int64).numpy(), "<i8"), (values.numpy(), "<f4")):
        h.update(np.ascontiguousarray(arr, dtype=np.dtype(dtype)).data)  # no copy on a little-endian host
    return h.digest()


def decoded_digest(parts: Mapping[str, bytes]) -> str:
    """Lowercase hex SHA-256 over each parameter's `param_digest`, by name (any decoding order)."""
    h = hashlib.sha256()
    for name in sorted(parts):
        h.update(name.encode() + b"\0" + parts[name])
    return h.hexdigest()


def digest_of(params: Mapping[str, SparseParam]) -> str:
    """`decoded_digest` of a whole decoded update."""
    return decoded_digest({name: param_digest(name, p) for name, p in params.items()})
