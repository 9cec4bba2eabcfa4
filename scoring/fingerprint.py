"""The base fingerprint of the global model as a hash chain (DESIGN.md §4.5).

Hashing a 145 GB model every window is too slow, and float results differ across hardware, so the
chain depends only on which exact submissions were aggregated: anyone following the published
selections computes the same fingerprints on any machine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

import torch


def checkpoint_fingerprint(tensors: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 over name, dtype, shape and raw bytes of each tensor, in sorted name order."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        for item in (name.encode(), str(t.dtype).encode(), ",".join(map(str, t.shape)).encode()):
            h.update(item)
            h.update(b"\x00")
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        h.update(b"\x00")
    return h.hexdigest()


def next_base(base: str, aggregated_digests: Iterable[str]) -> str:
    """base(W+1) = SHA-256 of `base(W)|d1|d2|…` over the sorted payload digests aggregated in W."""
    message = "|".join([base, *sorted(aggregated_digests)])
    return hashlib.sha256(message.encode()).hexdigest()
