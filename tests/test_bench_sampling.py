"""benchmarks/bench_sampling.py measures what it claims: under a crowd of noise identities DESIGN's
single draw evaluates honest peers in about B/N of windows, the tiers in every window."""

from __future__ import annotations

from benchmarks.bench_sampling import cell


def test_the_tiers_evaluate_proven_peers_every_window_under_a_crowd() -> None:
    design = cell(40, 8, tiers=False, seeds=2, windows=60, rotate=False)
    tiers = cell(40, 8, tiers=True, seeds=2, windows=60, rotate=False)
    assert design["honest_evaluated"] < 0.3  # 8 / 45 of the budget's draws, about
    assert tiers["honest_evaluated"] == 1.0
    assert tiers["newcomer_never"] == 0
