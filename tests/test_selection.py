import pytest

from scoring.ranking import PeerRating, RatingState, ranked_by_uid
from scoring.selection import (
    Candidate,
    SelectionConfig,
    select_aggregation,
    select_from_ratings,
    select_peers,
)


def test_gather_and_reserve_by_score_with_key_tie_break() -> None:
    scores = {u: float(10 - u // 2) for u in range(12)}  # pairs tie: (0,1), (2,3), ...
    sel = select_peers(scores, range(12), set(), {}, SelectionConfig(gather_peers=3, reserve_peers=2))
    assert sel.gather == (0, 1, 2)
    assert sel.reserve == (3, 4)


def test_exclusions() -> None:
    scores = {1: 5.0, 2: 4.0, 3: 3.0, 4: 2.0, 5: 1.0, 6: 9.0}
    valid = {1, 2, 3, 4, 5}  # 6 has the best score but no valid submission
    sel = select_peers(scores, valid, banned={2}, neg_streaks={3: 3, 4: 2}, cfg=SelectionConfig(2, 5))
    assert sel.gather == (1, 4)
    assert sel.reserve == (5,)


def test_zero_scores_selected_unless_positive_required() -> None:
    scores = {"b": 0.0, "a": 0.0, "c": 1.0}
    assert select_peers(scores, scores, (), {}).gather == ("c", "a", "b")
    strict = SelectionConfig(require_positive=True)
    assert select_peers(scores, scores, (), {}, strict).gather == ("c",)


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        SelectionConfig(gather_peers=0)


def test_select_from_ratings_reads_state() -> None:
    peers = {
        "a": PeerRating("a", 0, 25.0, 8.0, final=3.0),
        "b": PeerRating("b", 1, 25.0, 8.0, final=9.0, ban_until=10),
        "c": PeerRating("c", 2, 25.0, 8.0, final=5.0, consecutive_negative=3),
        "d": PeerRating("d", 3, 25.0, 8.0, final=1.0),
    }
    state = RatingState(peers, 4)
    sel = select_from_ratings(state, {"a", "b", "c", "d"}, 5, SelectionConfig(1, 1))
    assert (sel.gather, sel.reserve) == (("a",), ("d",))
    assert select_from_ratings(state, {"b"}, 10).gather == ("b",)  # ban over
    assert ranked_by_uid(state, 5) == [(2, 5.0), (0, 3.0), (3, 1.0), (1, 0.0)]


def cand(key: str, gain: float | None = 0.01, **kw: object) -> Candidate:
    fields: dict[str, object] = {"final": 0.0, "proven": True, "indicator": 1, **kw}
    return Candidate(key, gain=gain, **fields)  # type: ignore[arg-type]


def test_every_proven_contributor_is_aggregated_even_at_final_zero() -> None:
    """Among equals about half sit at ordinal <= 0: their proven work must still count."""
    peers = [cand("a", final=2.0), cand("b"), cand("c"), cand("d", final=1.0, gain=0.012)]
    assert select_aggregation(peers).gather == ("a", "d", "b", "c")


def test_unproven_unevaluated_and_failing_peers_are_left_out() -> None:
    peers = [
        cand("honest"),
        cand("warming_up", final=9.0, proven=False),  # positive final, no proof yet: the warm-up leak
        cand("not_evaluated", gain=None, indicator=None),
        cand("harmful", gain=-0.001),
        cand("banned", banned=True),
        cand("losing", neg_streak=3),
    ]
    assert select_aggregation(peers).gather == ("honest",)
    minus_one = [cand("a"), cand("b", indicator=-1)]  # proven, but no proof this window
    assert select_aggregation(minus_one).gather == ("a", "b")
    assert select_aggregation(minus_one, SelectionConfig(require_indicator=True)).gather == ("a",)


def test_weak_positive_peers_below_the_floor_do_not_dilute() -> None:
    peers = [cand(k, 0.010 + i * 1e-4) for i, k in enumerate("abcd")] + [cand("weak", 0.002)]
    assert "weak" not in select_aggregation(peers).gather  # below a quarter of the median gain
    assert select_aggregation(peers, SelectionConfig(gain_floor=0.15)).gather[-1] == "weak"


def test_only_one_of_twins_is_aggregated() -> None:
    peers = [cand("a"), cand("b", final=1.0), cand("c")]
    assert select_aggregation(peers, twins=[("b", "a")]).gather == ("b", "c")
    assert select_aggregation(peers, twins=[("c", "a")]).gather == ("b", "a")  # tie: smaller key


def test_a_cluster_of_three_similar_peers_is_left_out() -> None:
    peers = [cand(k) for k in "abcdh"]
    colluders = [("a", "b"), ("c", "b"), ("d", "e")]  # a-b-c one cluster; d's twin is not admissible
    assert select_aggregation(peers, twins=colluders).gather == ("d", "h")


def test_gather_cap_spills_into_reserve() -> None:
    peers = [cand(k, final=float(i)) for i, k in enumerate("abc")]
    sel = select_aggregation(peers, SelectionConfig(gather_peers=2, reserve_peers=5))
    assert (sel.gather, sel.reserve) == (("c", "b"), ("a",))
