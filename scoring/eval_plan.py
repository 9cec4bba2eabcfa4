"""What a peer is evaluated on: the sizes of a window's evaluation and the pages drawn for a peer.

Shared by the validator's own evaluation and by the evaluation workers, which must draw exactly the
same batches for the same (window, uid, seed) to produce the same losses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from scoring.data import Dataset, assigned_pages, batches, eval_sample
from scoring.loss_score import LossScoreConfig
from scoring.sampling import SamplingConfig


@dataclass(frozen=True, slots=True)
class EvalConfig:
    public_seed: str = "gauntlet"
    pages_per_peer: int = 16
    eval_pages: int = 8
    heldout_pages: int = 8
    batch_size: int = 8
    budget: int = 256
    loss: LossScoreConfig = LossScoreConfig()
    sampling: SamplingConfig = SamplingConfig()
    # flagged pairs' updates read on each other's pages (validator/round/cross.py): at most this many
    # readings per evaluated peer, each one more evaluation (copy-heavy windows of bench_fidelity
    # wanted up to 1.0: mixed ~10 a window beside 17 evaluations, copy_crowd 16 beside 12)
    cross_share: float = 0.5

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError("batch size must be positive")
        if self.cross_share < 0.0:
            raise ValueError("cross_share must be >= 0")
        # the page test (scoring/page_test.py) reads the spread of each side's pages: two at least
        if min(self.pages_per_peer, self.eval_pages, self.heldout_pages) < 2:
            raise ValueError("page counts must be at least 2")
        if self.budget < 0:
            raise ValueError("budget must be >= 0")


def own_batches(dataset: Dataset, window: int, uid: int, seed: str, cfg: EvalConfig) -> list[torch.Tensor]:
    """The peer's evaluation batches: its assigned pages, sampled with the window's secret seed (hex)."""
    assigned = assigned_pages(
        window, uid, public_seed=cfg.public_seed, n_pages=cfg.pages_per_peer, dataset=dataset
    )
    return batches(dataset, eval_sample(seed, uid, assigned=assigned, k=cfg.eval_pages), cfg.batch_size)
