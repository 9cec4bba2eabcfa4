import pytest

from scoring.sampling import History, SamplingConfig, sample_for_evaluation

PEERS = [f"hk{i:02d}" for i in range(30)]
RATINGS = {h: float(i) for i, h in enumerate(PEERS)}


def test_everyone_when_affordable() -> None:
    assert sample_for_evaluation(PEERS[::-1], 30, History(), 5, 0) == PEERS


def test_budget_split_across_rating_bins() -> None:
    picked = sample_for_evaluation(PEERS, 6, History(RATINGS), 5, 0)
    assert len(picked) == 6 and len(set(picked)) == 6
    bins = [sum(1 for h in picked if lo <= RATINGS[h] < lo + 10) for lo in (0, 10, 20)]
    assert bins == [2, 2, 2]


def test_deterministic_in_seed_and_window() -> None:
    a = sample_for_evaluation(PEERS, 7, History(RATINGS), 5, 1)
    assert a == sample_for_evaluation(PEERS, 7, History(RATINGS), 5, 1)
    draws = {tuple(sample_for_evaluation(PEERS, 7, History(RATINGS), w, 1)) for w in range(10)}
    assert len(draws) > 1


def test_favours_peers_not_evaluated_recently() -> None:
    recent = {h: 99 for h in PEERS[:15]}  # half evaluated last window: weight 2 vs 11
    counts = 0
    for w in range(200):
        picked = sample_for_evaluation(
            PEERS, 6, History(last_evaluated=recent), 100, w, SamplingConfig(bins=1)
        )
        counts += sum(1 for h in picked if h in recent)
    assert counts < 0.3 * 200 * 6


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        sample_for_evaluation(["a", "a"], 1, History(), 0, 0)
    with pytest.raises(ValueError):
        SamplingConfig(bins=0)
