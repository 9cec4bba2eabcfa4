"""The rating's parameters (scoring/ranking.py): OpenSkill's, the BMA gate, the proof of training
(scoring/proof.py) and the penalties."""

from __future__ import annotations

from dataclasses import dataclass, field

from scoring.page_test import PageTestConfig
from scoring.penalties import PenaltyConfig


@dataclass(frozen=True, slots=True)
class RatingConfig:
    mu: float = 25.0
    sigma: float = 25.0 / 3.0
    beta: float = 7.0
    tau: float = 0.1
    bma_alpha: float = 0.05
    bma_threshold: float = 0.10
    bma_warmup: int = 10
    proof_rate: float = 0.3
    proof_z: float = 1.0
    proof_margin: float = 0.03
    proof_min_evaluations: int = 3
    # a margin above −proof_tie counts as +1 (proof.positive): a −1 by a hair is a tie, not evidence of
    # lazy training (no adversary's proof changed at a tie up to 0.05, bench_fidelity)
    proof_tie: float = 0.01
    retention_alpha: float = 0.25  # the newest window's least weight in the retention average (proof.py)
    # each window's relative retention enters the average clipped to 1 ± this: the rule was calibrated
    # inside it (honest 0.89-1.17 a window, the rescaled quarter 0.75-0.97); late in 24-window demo runs
    # honest windows read −44 … +12, and one (−8.6) held a peer under `min_retention` for good
    retention_clip: float = 0.25
    page_test: PageTestConfig = PageTestConfig()  # the proof's per-page test (scoring/page_test.py)
    penalties: PenaltyConfig = field(default_factory=PenaltyConfig)

    def __post_init__(self) -> None:
        if self.sigma <= 0 or self.beta <= 0 or self.tau < 0:
            raise ValueError("need sigma > 0, beta > 0, tau >= 0")
        if not 0.0 < self.bma_alpha <= 1.0 or self.bma_warmup < 0:
            raise ValueError("need 0 < bma_alpha <= 1 and bma_warmup >= 0")
        if not 0.0 <= self.proof_rate < 1.0 or self.proof_z < 0.0 or not 0.0 <= self.proof_tie < 1.0:
            raise ValueError("need 0 <= proof_rate < 1, proof_z >= 0 and 0 <= proof_tie < 1")
        if not 0.0 < self.retention_alpha <= 1.0 or not 0.0 < self.retention_clip < 1.0:
            raise ValueError("need 0 < retention_alpha <= 1 and 0 < retention_clip < 1")
