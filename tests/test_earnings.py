"""Chain weights pay aggregated work (scoring/earnings.py): who is paid, and in which order."""

from __future__ import annotations

import pytest

from scoring.earnings import paid, ranked_by_uid, with_aggregated, worked
from scoring.ranking import PeerOutcome, PeerRating, RatingConfig, RatingState, Status, update_ratings
from scoring.weights import PowerWeights, RankWeights, RankWeightsConfig
from validator.round.rating import weights_for


def _state(*peers: PeerRating) -> RatingState:
    return RatingState({p.hotkey: p for p in peers}, 9)


def test_only_peers_aggregated_in_the_covered_windows_are_paid() -> None:
    top = PeerRating("top", 0, 40.0, 2.0, final=34.0)  # rated best, never aggregated (a sandbagger)
    used = PeerRating("used", 1, 30.0, 2.0, final=24.0)
    state = with_aggregated(_state(top, used), {"used"}, 7)
    assert [paid(p, 9, 3) for p in state.peers.values()] == [False, True]
    assert ranked_by_uid(state, 9, 3) == [(1, 24.0), (0, 0.0)]
    assert ranked_by_uid(state, 10, 3) == [(0, 0.0), (1, 0.0)]  # window 7 is no longer covered
    banned = with_aggregated(_state(PeerRating("b", 2, 30.0, 2.0, final=24.0, ban_until=12)), {"b"}, 9)
    assert ranked_by_uid(banned, 9, 3) == [(2, 0.0)]


def test_aggregated_peers_at_a_final_score_of_0_are_paid_below_the_rest_by_ordinal() -> None:
    """Honest peers among equals sit at an ordinal ≤ 0 early on; aggregated, they are still paid."""
    rated = PeerRating("rated", 0, 30.0, 2.0, final=4.0)
    low = PeerRating("low", 1, 24.0, 8.0)  # ordinal 0: final 0
    lower = PeerRating("lower", 2, 20.0, 8.0)  # ordinal −4
    idle = PeerRating("idle", 3, 35.0, 2.0, final=29.0)  # not aggregated
    state = with_aggregated(_state(rated, low, lower, idle), {"rated", "low", "lower"}, 9)
    ranked = ranked_by_uid(state, 9, 1)
    assert [u for u, _ in ranked] == [0, 1, 2, 3]
    assert ranked[0][1] == 4.0 and 0.0 < ranked[2][1] < ranked[1][1] <= 2.0 and ranked[3][1] == 0.0
    assert set(RankWeights().compute(ranked)) == {0, 1, 2}  # the default policy pays all three by rank
    weights = PowerWeights().compute(ranked)
    assert weights[0] > weights[1] > weights[2] > 0.0 and 3 not in weights
    # nobody above 0: still paid, in ordinal order, equal ordinals alike
    twin = PeerRating("twin", 4, 24.0, 8.0)
    alone = ranked_by_uid(with_aggregated(_state(low, lower, twin), {"low", "lower", "twin"}, 9), 9, 1)
    assert alone == [(1, 2 / 3), (4, 2 / 3), (2, 1 / 3)]


def test_a_final_score_set_to_0_by_a_gate_or_a_miss_is_not_paid_and_by_the_bma_is() -> None:
    """An ordinal above 0 with a final of 0. A gate (here an invalid submission) or a miss since the
    aggregation: not paid. The BMA alone: paid like an ordinal ≤ 0, higher ordinals higher (the
    selection aggregates a proven peer whatever its BMA; a red-team run found one paid nothing for
    an update the model used). A miss also ends the pay of an ordinal ≤ 0, as a third one ends that
    of a positive final (it used to keep its value through any number of misses)."""
    rated = PeerRating("rated", 0, 30.0, 2.0, final=4.0)
    bma = PeerRating("bma", 1, 40.0, 2.0, bma=-0.1)  # final 0 though its ordinal is 34
    honest = PeerRating("honest", 2, 24.0, 8.0)  # ordinal 0
    gated = PeerRating("gated", 3, 40.0, 2.0, gated=True)
    missed = PeerRating("missed", 4, 24.0, 8.0, consecutive_misses=1)
    idle = PeerRating("idle", 5, 24.0, 8.0, inactive_windows=1)
    everyone = _state(rated, bma, honest, gated, missed, idle)
    ranked = ranked_by_uid(with_aggregated(everyone, set(everyone.peers), 9), 9, 1)
    assert ranked == [(0, 4.0), (1, 4 / 3), (2, 2 / 3), (3, 0.0), (4, 0.0), (5, 0.0)]


def test_a_proven_peer_the_bma_holds_at_0_is_paid_for_the_window_that_aggregated_it() -> None:
    """Seven +1 indicators, then four −1: proven still, its BMA under the threshold after the
    warm-up, so its final is 0; the selection aggregated it, so it is paid, under the others."""
    cfg, state = RatingConfig(), RatingState()
    for w, sign in enumerate([1] * 7 + [-1] * 4, start=1):
        outcomes = [
            PeerOutcome("me", 0, Status.OK, 0.01, sign, own_gain=0.01 * (1 + 0.2 * sign), own_t=2.3),
            *(PeerOutcome(h, u, Status.OK, 0.01 + u / 1000, 1, own_gain=0.012 + u / 1000, own_t=2.3)
              for h, u in (("a", 1), ("b", 2))),
        ]  # fmt: skip
        state = with_aggregated(update_ratings(state, w, outcomes, cfg), {"me", "a", "b"}, w)
    me = state.peers["me"]
    assert me.evaluations > cfg.bma_warmup and me.bma < cfg.bma_threshold
    assert me.final == 0.0 and not me.gated
    ranked = dict(ranked_by_uid(state, 11, 1))
    assert 0.0 < ranked[0] < min(ranked[1], ranked[2]) / 2
    assert 0 in RankWeights().compute(list(ranked.items()))


def _proven(hotkey: str, uid: int, mu: float, sigma: float, final: float) -> PeerRating:
    return PeerRating(
        hotkey, uid, mu, sigma, bma=0.5, evaluations=5, positives=5, margin_sum=1.0, windows_seen=5,
        final=final, last_aggregated=9,
    )  # fmt: skip


def test_a_peer_gated_in_a_later_window_is_not_paid_whatever_its_ordinal() -> None:
    """Three peers aggregated in window 9; in window 10 two send invalid bytes and one is left out of
    the match. Each is held at 0 by its own evidence, so none is paid for window 9, at an ordinal
    above 0 (`high`) or at or below it (`low`, `unmatched`): the ordinal alone used to pay the last
    two the step for peers whose ordinal holds their final at 0."""
    cfg = RatingConfig()
    state = RatingState(
        {
            "ok": _proven("ok", 1, 30.0, 3.0, 21.0),
            "high": _proven("high", 2, 30.0, 2.0, 24.0),
            "low": _proven("low", 3, 12.0, 7.0, 0.0),
            "unmatched": _proven("unmatched", 4, 12.0, 7.0, 0.0),
        },
        9,
    )
    outcomes = [
        PeerOutcome("ok", 1, Status.OK, score=1.0, indicator=1, own_gain=0.5),
        PeerOutcome("high", 2, Status.INVALID),
        PeerOutcome("low", 3, Status.INVALID),
        PeerOutcome("unmatched", 4, Status.OK, score=1.0, indicator=1, own_gain=0.5, matched=False),
    ]
    after = update_ratings(state, 10, outcomes, cfg)
    assert after.peers["low"].ordinal <= 0.0 and after.peers["unmatched"].ordinal <= 0.0
    ranked = dict(ranked_by_uid(after, 10, 3))
    assert ranked[1] > 0.0 and ranked[2] == ranked[3] == ranked[4] == 0.0, ranked
    assert set(RankWeights().compute(list(ranked.items()))) == {1}
    assert all(after.peers[h].gated for h in ("high", "low", "unmatched")) and not after.peers["ok"].gated
    # the same peers evaluated and matched again: held at 0 by their ordinal alone, paid the step
    again = update_ratings(
        after, 11, [PeerOutcome(h, u, Status.OK, score=1.0, indicator=1, own_gain=0.5) for h, u in
                    (("ok", 1), ("low", 3))], cfg,
    )  # fmt: skip
    assert dict(ranked_by_uid(again, 11, 3))[3] > 0.0
    assert not again.peers["low"].gated and again.peers["low"].final == 0.0


def test_a_weight_set_pays_each_peer_for_the_windows_that_aggregated_it() -> None:
    """A red-team run: with a set every three windows a peer aggregated in one of them was paid as
    much as one aggregated in all three, so nine identities each training one window in three took
    0.69 of the weights beside four honest peers (three identities training every window, the
    same work, would take 0.43). Each peer's weight now follows its share of the windows."""
    honest = [PeerRating(f"h{i}", i, 25.0, 1.0, final=10.0) for i in range(4)]
    part = [PeerRating(f"p{i}", 10 + i, 25.0, 1.0, final=10.0) for i in range(9)]
    state = _state(*honest, *part)
    for window in (3, 4, 5):  # the honest peers every window, three part-timers a window
        turn = {p.hotkey for i, p in enumerate(part) if i % 3 == window % 3}
        state = with_aggregated(state, {p.hotkey for p in honest} | turn, window)
    weights = weights_for(state, 5, RankWeights(), 3)
    entity = sum(weights[10 + i] for i in range(9))
    assert entity == pytest.approx(3 / 7) and sum(weights.values()) == pytest.approx(1.0)
    assert weights[0] == pytest.approx(3 * weights[10])
    assert {round(worked(p, 5, 3), 3) for p in state.peers.values()} == {1.0, 0.333}
    # a set every window (the demo's) pays as before: aggregated or not
    assert weights_for(state, 5, RankWeights(), 1) == RankWeights().compute(ranked_by_uid(state, 5, 1))
    # a rating stored before the mask existed reads its last aggregated window alone
    legacy = PeerRating("old", 99, 25.0, 1.0, final=10.0, last_aggregated=5)
    assert worked(legacy, 5, 3) == pytest.approx(1 / 3) and worked(legacy, 9, 3) == 0.0
    # a burn uid that is not a paid peer keeps its share
    burn = RankWeights(RankWeightsConfig(burn_uid=500, burn_share=0.1))
    assert weights_for(state, 5, burn, 3)[500] == pytest.approx(0.1)
    # remembered for MEMORY windows: a set after a long outage reads the last MEMORY of them
    long = with_aggregated(_state(honest[0]), {"h0"}, 1)
    for window in range(2, 60):
        long = with_aggregated(long, {"h0"}, window)
    assert worked(long.peers["h0"], 59, 100) == 1.0
