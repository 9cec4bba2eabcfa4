"""Echoes of the window's consensus (issue 12): an update that is the mean of the others'.

A peer that proved its training and then stops can download the window's other submissions and
send their average, re-compressed and signed as its own. The copy check compares peers beyond the
window's consensus (scoring/similarity.py), and an echo of the consensus has nothing beyond it, so
no pair is flagged; its held-out gain is the consensus's, better than any one peer's. Measured at
the demo's sizing (4 honest peers, windows 4-6): it was aggregated, and paid 13 % of the weights.

What gives it away is how little of it is its own. Each update's *own share* is 1 − c², c the
cosine of its sketch with the leave-one-out consensus of the others (weighted as the residual
similarity weighs them, so junk does not blur it). Honest peers trained on their own data keep
a share of their own at any stage of training; an echo keeps only its re-compression error.
Measured (seed 0, windows 1-6): at 20 inner steps honest shares 0.77-0.94 and the echo's 0.30; at
1 inner step honest 0.30-0.56 and the echo's 0.11-0.14. Read relative to the window's median share
among proven peers (identities that never proved training cannot move it), honest peers stayed at
0.9 of it or above, the echo at 0.24-0.38: under `ratio` (0.5) an update is an echo.

What this closes is the free copy of everybody's work. Adding noise of its own lifts an echo's
share above the bar at little cost to its gain (top-k re-compression keeps the mean's large
coordinates and spreads dense noise thin): such an echo is aggregated until its proof of training
lapses, like any peer that stopped training (`echo_noisy` in docs/fidelity-log.md).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from scoring.copy_config import UniquenessConfig
from scoring.similarity import count_sketch, sample_blocks, sampled
from scoring.types import SparseParam

F64 = npt.NDArray[np.float64]
MIN_PEERS = 4  # an echo needs at least three others to average, and the consensus three to be one
MIN_REFERENCE = 3  # proven peers whose median share is the window's reference


@dataclass(frozen=True, slots=True)
class Echo:
    """A peer's update that is mostly the window's consensus: its own share and the reference."""

    share: float
    reference: float

    @property
    def detail(self) -> str:
        return (
            f"echo of the window's consensus: own share {self.share:.3f}, proven median {self.reference:.3f}"
        )


def own_shares(
    updates: Sequence[Mapping[str, SparseParam]], cfg: UniquenessConfig, rng: np.random.Generator
) -> F64:
    """Each update's share beyond the leave-one-out consensus of the others (module docstring),
    from count sketches of one seeded sample of chunks; rounded, so replay compares it exactly."""
    blocks = sample_blocks(updates[0], cfg, rng)
    if not blocks:
        return np.ones(len(updates), dtype=np.float64)
    idx, val = sampled(updates, blocks)
    unit = count_sketch(idx, val, cfg.sketch_bits, rng)
    unit /= torch.linalg.vector_norm(unit, dim=1, keepdim=True).clamp_min(1e-30)
    mean = unit.sum(0)
    weight = (unit @ (mean / torch.linalg.vector_norm(mean).clamp_min(1e-30))).clamp_min(0.0)
    own = weight[:, None] * unit
    others = own.sum(0, keepdim=True) - own  # the consensus each update leaves out
    del own
    others /= torch.linalg.vector_norm(others, dim=1, keepdim=True).clamp_min(1e-30)
    cosine = (unit * others).sum(1).clamp_min(0.0)  # against the consensus counts as all its own
    share: F64 = np.asarray((1.0 - cosine * cosine).numpy(), dtype=np.float64)
    return np.round(share, 9)


def find_echoes(
    updates: Mapping[str, Mapping[str, SparseParam]],
    proven: Collection[str],
    cfg: UniquenessConfig,
    ratio: float,
    seed: int,
) -> dict[str, Echo]:
    """The peers (keys of `updates`, valid this window) whose own share is under `ratio` × the
    median share of the `proven` among them; none with fewer than `MIN_PEERS` updates or
    `MIN_REFERENCE` proven ones (nothing to call a consensus or a typical share)."""
    keys = sorted(updates)
    if ratio <= 0.0 or len(keys) < MIN_PEERS:
        return {}
    shares = own_shares([updates[k] for k in keys], cfg, np.random.default_rng(seed))
    reference = [float(s) for k, s in zip(keys, shares, strict=True) if k in proven]
    if len(reference) < MIN_REFERENCE:
        return {}
    typical = float(np.median(reference))
    return {
        k: Echo(float(s), round(typical, 9)) for k, s in zip(keys, shares, strict=True) if s < ratio * typical
    }
