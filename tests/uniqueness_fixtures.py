"""Planted copies for uniqueness tests and the policy benchmark."""

from __future__ import annotations

import numpy as np
import torch

from scoring.types import SparseParam


def copy_of(
    src: dict[str, SparseParam], own: dict[str, SparseParam], frac: float, rng: np.random.Generator
) -> dict[str, SparseParam]:
    """`own`, with a random `frac` of its slots replaced by `src`'s (same stratum keeps order)."""
    out = {}
    for name, p in own.items():
        k = p.indices.numel()
        take = torch.zeros(k, dtype=torch.bool)
        take[torch.from_numpy(rng.permutation(k)[: round(frac * k)])] = True
        out[name] = SparseParam(
            p.shape,
            torch.where(take, src[name].indices, p.indices),
            torch.where(take, src[name].values, p.values),
        )
    return out
