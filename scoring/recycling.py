"""Recycled work: a submission that repeats an update of an earlier window (DESIGN.md §5.7, issue 12).

A replay is caught by its payload digest; flipping a few value codes, or re-encoding another peer's
last update or the last global aggregate, gives a new digest and used to pass every check: it then
scored a small positive gain and could be aggregated whenever the noisy proof of training let it
through. This compares each of this window's valid updates with the updates aggregated in the last
few windows (validator/round/recycling.py says why only those), with the machinery of the copy check
(scoring/similarity.py: one seeded sample of chunks, positions and residual values beyond the
consensus of all compared updates), calibrated on the cross-window pairs themselves:

- strength = max(overlap excess over the median cross-window pair, residual similarity), and, as for
  copies, positions alone never flag a pair whose residuals do not agree (`similarity_floor`);
- measured at the demo's sizing (8 windows, every adversary, `bench_fidelity`'s mixed scenario):
  honest updates against every earlier one, their own included, overlap ≤ 0.17 (median 0.06–0.10)
  with residual similarity ≤ 0.02; error feedback makes a peer's consecutive updates nearly
  disjoint (overlap 0.02, similarity −0.14 … −0.25). Another peer's last update with 1 % of its
  codes flipped: 1.00 and 1.00; the last global aggregate re-encoded: overlap 0.37–0.52 (over the
  sampled chunks), similarity 0.22–0.33 with the updates it averaged.

The order is never in doubt (the earlier submission was judged a window or more before this one was
due), so every finding names the current peer; its tier is the copy tiers' (halve, reset, ban).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scoring.similarity import Block, estimate_overlaps, residual_similarity, sample_blocks, sampled
from scoring.types import SparseParam
from scoring.uniqueness import CopyTier, UniquenessConfig

Update = Mapping[str, SparseParam]
DEFAULT = UniquenessConfig()


@dataclass(frozen=True, slots=True)
class Earlier:
    """An update of an earlier window as the check uses it: whose, of which window, and its kept
    slots in the window's sampled chunks (`similarity.sampled`). Only these rows are kept: at the
    run's size an update is gigabytes, its rows a few kilobytes."""

    hotkey: str
    window: int
    idx: npt.NDArray[np.int64]
    val: npt.NDArray[np.float32]


# The earlier updates sampled on the blocks given: the window's secret sample is drawn first, then
# each earlier update is read once, reduced to its rows and dropped (validator/round/recycling.py).
EarlierRows = Callable[[Sequence[Block]], Sequence[Earlier]]


@dataclass(frozen=True, slots=True)
class Recycled:
    """`offender`'s update of this window repeats `source`'s update of window `window`."""

    offender: str
    source: str
    window: int
    overlap: float  # shared kept positions (same sign) over the sampled chunks
    similarity: float  # residual similarity (scoring/similarity.py)
    tier: CopyTier

    @property
    def detail(self) -> str:
        return (
            f"similarity {self.similarity:.2f}, overlap {self.overlap:.2f} with the submission of "
            f"{self.source} in window {self.window}"
        )


def find_recycled(
    current: Sequence[tuple[str, Update]],
    earlier: EarlierRows,
    cfg: UniquenessConfig = DEFAULT,
    seed: int = 0,
) -> dict[str, Recycled]:
    """Each current peer whose update repeats an earlier one, with its strongest finding."""
    if not current:
        return {}
    rng = np.random.default_rng(seed)
    blocks = sample_blocks(current[0][1], cfg, rng)
    rows = earlier(blocks) if blocks else []
    if not rows:  # nothing to compare with
        return {}
    idx, val = sampled([u for _, u in current], blocks)
    # one row for each distinct sampled update, mapped back to every sender of it below: eight copies
    # of one update weighed eight times in the consensus the residuals are read against, which then
    # pulled every other update's residual the same way (an honest update read 0.15 against an
    # honest one of the window before and was rejected: bench_fidelity's copy_crowd, 2.0275 variant)
    rows_of, first = _distinct(idx, val)
    idx = np.vstack([idx[first], np.stack([e.idx for e in rows])])
    val = np.vstack([val[first], np.stack([e.val for e in rows])])
    n = len(first)
    if n + len(rows) < 3:  # too few distinct updates to calibrate against
        return {}
    estimates = estimate_overlaps(idx, val, cfg.sketch_bits, rng)[:n, n:]
    similarity = residual_similarity(idx, val, cfg.sketch_bits, rng)[:n, n:]
    baseline = float(np.clip(np.median(estimates), 0.0, 0.99))
    excess = (estimates - baseline) / (1.0 - baseline)
    # only pairs whose residuals agree are looked at: honest pairs sit far below the floor
    pick = similarity >= cfg.similarity_floor
    worst: dict[str, Recycled] = {}
    for i, j in zip(*np.nonzero(pick), strict=True):
        source = rows[int(j)]
        sim = float(similarity[i, j])
        tier = cfg.tier(max(float(excess[i, j]), sim))
        if tier is CopyTier.NONE:
            continue
        overlap = _sampled_overlap(idx[i], val[i], idx[n + j], val[n + j])
        for k in rows_of[int(i)]:
            hotkey = current[k][0]
            found = Recycled(hotkey, source.hotkey, source.window, overlap, sim, tier)
            best = worst.get(hotkey)
            if best is None or (found.tier, found.similarity) > (best.tier, best.similarity):
                worst[hotkey] = found
    return dict(sorted(worst.items()))


def _distinct(idx: npt.NDArray[np.int64], val: npt.NDArray[np.float32]) -> tuple[list[list[int]], list[int]]:
    """The senders of each distinct sampled row (in order of first appearance), and each one's first."""
    groups: dict[bytes, list[int]] = {}
    for k in range(idx.shape[0]):
        groups.setdefault(idx[k].tobytes() + val[k].tobytes(), []).append(k)
    senders = list(groups.values())
    return senders, [g[0] for g in senders]


def _sampled_overlap(
    idx_a: npt.NDArray[np.int64],
    val_a: npt.NDArray[np.float32],
    idx_b: npt.NDArray[np.int64],
    val_b: npt.NDArray[np.float32],
) -> float:
    """Kept positions (coordinate and sign) two rows share, over the row's length."""
    keys_a, keys_b = idx_a * 2 + (val_a > 0), idx_b * 2 + (val_b > 0)
    return float(np.intersect1d(keys_a, keys_b).size) / max(keys_a.size, 1)
