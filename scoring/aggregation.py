"""Outer step of the global model from the selected peers' updates (DESIGN.md §8).

Per parameter: clip each update to the window's median-norm reference (`clipping.clip_factors`, the
same factors LossScore uses), average with weight 1/R, and step `θ ← θ − outer_lr · mean`. One dense
float32 buffer of one parameter is the peak extra memory; updates are added in the given order, so
the result is deterministic for a given selection order. The loop is parameter-major: with stored
updates (scoring/lazy_update.py) each peer's parameter is decoded when its turn comes and dropped
after it, so the selected peers' updates are never all decoded at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from scoring.clipping import clip_factors
from scoring.consensus import OUTER_LR
from scoring.types import SparseParam


def clipped_values(p: SparseParam, factor: float) -> torch.Tensor:
    """The values of one clipped parameter update: exactly what is evaluated and aggregated."""
    return p.values if factor == 1.0 else p.values * factor


def aggregate_into(
    params: Mapping[str, torch.Tensor],
    updates: Sequence[Mapping[str, SparseParam]],
    reference: Mapping[str, float],
    outer_lr: float = OUTER_LR,
    weights: Sequence[float] | None = None,
) -> dict[str, float]:
    """Apply the clipped mean of `updates` to `params` in place; returns the mean's norm per name.

    `weights`: each clipped update's coefficient (scoring/selection.py) instead of 1/R. With no
    updates the model is unchanged and the result is empty."""
    if outer_lr < 0:
        raise ValueError("outer_lr must be >= 0")
    if weights is not None and (len(weights) != len(updates) or not all(w >= 0.0 for w in weights)):
        raise ValueError("need one weight >= 0 per update")
    if not updates:
        return {}
    factors = [clip_factors(u, reference) for u in updates]
    norms: dict[str, float] = {}
    with torch.no_grad():
        for name, param in params.items():
            mean = _mean_update(name, param.numel(), updates, factors, weights)
            param.view(-1).add_(mean.to(param.device, param.dtype), alpha=-outer_lr)
            norms[name] = float(torch.linalg.vector_norm(mean))
    return norms


def _mean_update(
    name: str,
    numel: int,
    updates: Sequence[Mapping[str, SparseParam]],
    factors: Sequence[Mapping[str, float]],
    weights: Sequence[float] | None,
) -> torch.Tensor:
    """(numel,) float32: Σ clipped updates / R, or Σ weight × clipped update, accumulated sparsely
    in the given order."""
    buf = torch.zeros(numel, dtype=torch.float32)
    for i, (update, factor) in enumerate(zip(updates, factors, strict=True)):
        p = update[name]
        if p.numel != numel:
            raise ValueError(f"{name}: update has {p.numel} elements, parameter {numel}")
        values = clipped_values(p, factor[name])
        buf.index_add_(0, p.indices, values if weights is None else values * weights[i])
    return buf if weights is not None else buf.div_(len(updates))
