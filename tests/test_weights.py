import itertools

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from scoring.weights import PowerWeights, PowerWeightsConfig, RankWeights, RankWeightsConfig


def test_rank_schedule_literal_values_without_monotone_cap() -> None:
    cfg = RankWeightsConfig(top_peers=3, tail_peers=2, monotone=False)
    w = RankWeights(cfg).compute([(7, 3.0), (8, 2.0), (9, 1.0), (10, 0.5), (11, 0.25), (12, 0.1)])
    # ramp 2, 1.5, 1 over 4.5 × 0.75; tail 1, 0.5 over 1.5 × 0.25
    assert w == pytest.approx({7: 1 / 3, 8: 0.25, 9: 1 / 6, 10: 1 / 6, 11: 1 / 12})


def test_rank_schedule_default_is_monotone_and_sums_to_one() -> None:
    ranked = [(u, 100.0 - u) for u in range(40)]
    w = RankWeights().compute(ranked)
    assert len(w) == 30
    values = [w[u] for u in range(30)]
    assert values[0] == pytest.approx(2 * values[19])
    assert values[20] == pytest.approx(values[19])
    assert values[21] == pytest.approx(values[20] / 2)
    assert sum(values) == pytest.approx(1.0)


def test_equal_scores_are_paid_alike_whatever_their_uids() -> None:
    w = RankWeights().compute([(7, 5.0), (4, 5.0), (9, 1.0)])
    assert w[4] == w[7] > w[9] and sum(w.values()) == pytest.approx(1.0)
    # a tie across the cut (top 20 + tail 10) is paid whole: 32 equal peers, 32 equal weights
    equal = RankWeights().compute([(u, 1.0) for u in range(32)])
    assert len(equal) == 32 and len(set(equal.values())) == 1


def test_burn_and_empty() -> None:
    cfg = RankWeightsConfig(burn_uid=0, burn_share=0.4)
    w = RankWeights(cfg).compute([(5, 1.0), (6, 2.0)])
    assert w[0] == pytest.approx(0.4)
    assert w[5] + w[6] == pytest.approx(0.6)
    assert RankWeights(cfg).compute([(5, 0.0)]) == {0: 1.0}
    assert RankWeights().compute([]) == {}
    with pytest.raises(ValueError):
        RankWeightsConfig(burn_share=0.1)


def test_power_weights_literal() -> None:
    w = PowerWeights().compute([(1, 1.0), (2, 2.0), (3, -1.0)])
    assert w == pytest.approx({1: 0.2, 2: 0.8})
    top1 = PowerWeights(PowerWeightsConfig(max_peers=1, burn_uid=9, burn_share=0.5)).compute(
        [(1, 1.0), (2, 2.0)]
    )
    assert top1 == pytest.approx({2: 0.5, 9: 0.5})


scores = st.lists(st.floats(min_value=-1.0, max_value=100.0), min_size=0, max_size=45)


@given(scores, st.floats(min_value=0.0, max_value=1.0), st.booleans())
@example([1.2755908980564141e-161], 0.5, True)  # squared, a subnormal: normalising by it lost 1.5 %
def test_weight_properties(values: list[float], burn: float, power: bool) -> None:
    ranked = list(enumerate(values, start=1))
    policy = (
        PowerWeights(PowerWeightsConfig(burn_uid=0, burn_share=burn))
        if power
        else RankWeights(RankWeightsConfig(burn_uid=0, burn_share=burn))
    )
    w = policy.compute(ranked)
    assert all(v >= 0.0 for v in w.values())
    assert sum(w.values()) == pytest.approx(1.0)
    peers = {u: v for u, v in w.items() if u != 0}
    if peers:
        assert sum(peers.values()) == pytest.approx(1.0 - burn)
    order = sorted(peers, key=lambda u: (-values[u - 1], u))
    got = [peers[u] for u in order]
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(got))
    # equal scores, equal weights (not ordered by uid), and a tie is paid whole or not at all
    for a, b in itertools.combinations(range(1, len(values) + 1), 2):
        if values[a - 1] == values[b - 1] and (a in peers or b in peers):
            assert peers.get(a) == pytest.approx(peers.get(b))
