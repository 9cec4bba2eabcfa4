"""Per-parameter norm clipping, shared by LossScore and aggregation (DESIGN.md §5.6, §8).

The reference is a per-parameter quantile of the proven peers' norms. DESIGN.md names the median;
the validator takes the upper quartile (CheckConfig.clip_quantile): honest peers that do part of
the work send smaller updates, and when they were half of the window the median clipped every full
update to their size, so each outer step shrank (two full peers with a quarter- and a tenth-trained
one ended 19 % above the two full peers alone; benchmarks/bench_fidelity.py runs it as `weak_half`).
The quantile is capped at `clip_cap` × the median (validator/round/checking.py).

Evaluation and aggregation must use the same factors so that the update evaluated for a peer is
bit-for-bit the update aggregated for it; both call `clip_factors` with the window's reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import median

from scoring.types import SparseParam, param_norms


def median_norms(norms: Sequence[Mapping[str, float]], floor: float = 0.0) -> dict[str, float]:
    """The per-parameter median of the given peers' update norms (DESIGN.md's clip reference)."""
    return quantile_norms(norms, 0.5, floor)


def quantile_norms(
    norms: Sequence[Mapping[str, float]], quantile: float, floor: float = 0.0
) -> dict[str, float]:
    """The per-parameter `quantile` of the given peers' update norms (the window's clip reference),
    interpolated linearly between order statistics (0.5 is the median).

    Norms at or below `floor` are left out: a peer that sends nothing for a parameter says nothing
    about its scale, and a majority of empty updates would otherwise make the reference 0 and clip
    every real update to nothing. A parameter nobody updated gets reference 0 (nothing to clip)."""
    if not 0.0 <= quantile <= 1.0:
        raise ValueError("quantile must be in [0, 1]")
    if not norms:
        return {}
    out = {}
    for name in norms[0]:
        real = sorted(n[name] for n in norms if n[name] > floor)
        out[name] = interpolated(real, quantile) if real else 0.0
    return out


def interpolated(ordered: Sequence[float], quantile: float) -> float:
    """The `quantile` of sorted values, linear between neighbours (the median exactly at 0.5)."""
    if quantile == 0.5:  # bit for bit the median DESIGN.md names (and earlier windows were scored with)
        return float(median(ordered))
    position = quantile * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


def clip_factor(norm: float, reference: float) -> float:
    """Scale in [0, 1] that brings `norm` down to `reference`; updates below it are left alone."""
    if norm <= reference or norm == 0.0:
        return 1.0
    return reference / norm


def clipped_mass(norms: Mapping[str, float], reference: Mapping[str, float]) -> float:
    """The clipped update's total norm ÷ the reference's, at most 1: how much of an update it is
    (scoring/selection.py). A parameter without a reference is not clipped, as in `clip_factors`."""
    ref = sum(r * r for r in reference.values())
    clipped = sum((n * clip_factor(n, reference.get(k, n))) ** 2 for k, n in norms.items())
    return min(1.0, (clipped / ref) ** 0.5) if ref > 0.0 else 1.0


def inflation(norms: Mapping[str, float], reference: Mapping[str, float]) -> float:
    """The median over parameters of the update's norm ÷ the reference's: how far above the window's
    upper honest band the update sits (scoring/selection.py). The median, not the total: a few
    parameters (embedding rows the peer's data touched) may legitimately stand out; an update
    scaled up as a whole stands out in most of them. 0 when nothing is comparable."""
    ratios = sorted(norms[k] / r for k, r in reference.items() if k in norms and r > 0.0)
    return interpolated(ratios, 0.5) if ratios else 0.0


def clip_factors(params: Mapping[str, SparseParam], reference: Mapping[str, float]) -> dict[str, float]:
    """One factor per parameter; a parameter without a reference is not clipped."""
    factors: dict[str, float] = {}
    norms = param_norms(params)  # a stored update's recorded norms: nothing is decoded for them
    for name in params:
        ref = reference.get(name)
        factors[name] = 1.0 if ref is None else clip_factor(norms[name], ref)
    return factors
