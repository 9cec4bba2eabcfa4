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


SHAPES = {"w": (30 * 4096 + 1000,), "b": (40,)}  # 30 full chunks, a 1000-long one, a 40-long one


def random_update(rng: np.random.Generator) -> dict[str, SparseParam]:
    """One kept index per stratum of 64 in every chunk: sorted, unique, random."""
    out = {}
    for name, shape in SHAPES.items():
        n = shape[0]
        parts = []
        for start in range(0, n, 4096):
            length = min(4096, n - start)
            k = min(64, length)
            if length == 4096:
                parts.append(start + np.arange(k) * 64 + rng.integers(0, 64, k))
            else:
                parts.append(start + np.sort(rng.choice(length, k, replace=False)))
        idx = np.concatenate(parts)
        vals = rng.standard_normal(idx.size).astype(np.float32)
        out[name] = SparseParam(shape, torch.from_numpy(idx), torch.from_numpy(vals))
    return out
