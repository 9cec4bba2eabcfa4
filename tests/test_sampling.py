"""Which peers are evaluated when the budget cannot cover all (scoring/sampling.py)."""

from __future__ import annotations

import pytest

from scoring.copy_config import CopyTier
from scoring.ranking import PeerOutcome, PeerRating, RatingState, Status, update_ratings
from scoring.rating_config import RatingConfig
from scoring.sampling import History, SamplingConfig, history_of, sample_for_evaluation

PEERS = [f"hk{i:02d}" for i in range(30)]
RATINGS = {h: float(i) for i, h in enumerate(PEERS)}
EVERYONE = History(RATINGS, proven=frozenset(PEERS))  # one tier: DESIGN's draw


def test_everyone_when_affordable() -> None:
    assert sample_for_evaluation(PEERS[::-1], 30, History(), 5, 0) == PEERS


def test_budget_split_across_rating_bins() -> None:
    picked = sample_for_evaluation(PEERS, 6, EVERYONE, 5, 0)
    assert len(picked) == 6 and len(set(picked)) == 6
    bins = [sum(1 for h in picked if lo <= RATINGS[h] < lo + 10) for lo in (0, 10, 20)]
    assert bins == [2, 2, 2]


def test_deterministic_in_seed_and_window() -> None:
    for history in (EVERYONE, History(RATINGS, proven=frozenset(PEERS[:5]))):
        a = sample_for_evaluation(PEERS, 7, history, 5, 1)
        assert a == sample_for_evaluation(PEERS, 7, history, 5, 1)
        draws = {tuple(sample_for_evaluation(PEERS, 7, history, w, 1)) for w in range(10)}
        assert len(draws) > 1


def test_favours_peers_not_evaluated_recently() -> None:
    recent = {h: 99 for h in PEERS[:15]}  # half evaluated last window: weight 2 vs 11
    counts = 0
    for w in range(200):
        history = History(last_evaluated=recent, proven=frozenset(PEERS))
        picked = sample_for_evaluation(PEERS, 6, history, 100, w, SamplingConfig(bins=1))
        counts += sum(1 for h in picked if h in recent)
    assert counts < 0.3 * 200 * 6


SYBILS = [f"s{i:03d}" for i in range(200)]
HONEST = ["h0", "h1", "h2", "h3"]


def test_proven_peers_before_a_crowd_of_unproven_identities() -> None:
    """DESIGN's single draw gave 200 noise identities 200/204 of the budget in every window (an
    honest peer evaluated in 4 % of windows at B = 8); proven peers now come first, and the
    unproven keep a reserve of a quarter of the budget."""
    history = History({h: 10.0 for h in HONEST}, proven=frozenset(HONEST))
    for w in range(20):
        picked = sample_for_evaluation([*HONEST, *SYBILS], 8, history, w, 3)
        assert set(HONEST) <= set(picked) and len(picked) == 8
    flat = [
        sample_for_evaluation([*HONEST, *SYBILS], 8, History(proven={*HONEST, *SYBILS}), w, 3)
        for w in range(50)
    ]
    assert sum(h in p for p in flat for h in HONEST) < 0.2 * 50 * 4
    # more proven peers than the budget: the reserve still goes to unproven peers
    many = [f"p{i:02d}" for i in range(12)]
    picked = sample_for_evaluation([*many, *SYBILS], 8, History(proven=frozenset(many)), 0, 3)
    assert sum(h in many for h in picked) == 6


def test_a_newcomer_is_not_delayed_by_identities_registered_after_it() -> None:
    """Unproven peers never evaluated are served first come first served (the longest rated first):
    200 identities that registered after an honest newcomer do not delay it, re-registered or not.
    Before them come the peers whose own pages gained (an honest newcomer after its first
    evaluation, a trial that fell short, a proof lost); after them those that showed no such gain."""
    history = History(proven=frozenset(HONEST), seen={"new": 5} | {s: 1 for s in SYBILS})
    for w in range(10):
        assert "new" in sample_for_evaluation([*HONEST, "new", *SYBILS], 6, history, w, 7)
    older = {s: 9 for s in SYBILS[:10]}  # seen before the newcomer: ahead of it
    tried = {s: 3 for s in SYBILS[:8]}  # evaluated three times, their pages gained nothing
    evidence = {s: -0.5 for s in tried} | {"lost": 4.0, "weak": 1.2, "s000": 0.9, "half": 0.3}
    history = History(
        proven=frozenset(HONEST), seen={"new": 5} | older, evidence=evidence,
        evaluations=tried | {"lost": 20, "weak": 3, "half": 1},
    )  # fmt: skip
    everyone = [*HONEST, "new", "lost", "weak", "half", *SYBILS]
    # 4 proven; then lost and weak (their pages gained), s008, s009 and new (never evaluated, by
    # how long each is rated), the other 190 never evaluated, half (one evaluation), the rest
    assert set(sample_for_evaluation(everyone, 7, history, 0, 7)) == {*HONEST, "lost", "weak", "s008"}
    assert set(sample_for_evaluation(everyone, 9, history, 0, 7)) == {
        *HONEST,
        "lost",
        "weak",
        "s008",
        "s009",
        "new",
    }
    last = sample_for_evaluation(everyone, len(everyone) - 8, history, 0, 7)
    assert "half" in last and not set(tried) & set(last)


def test_banned_peers_take_only_what_everyone_else_leaves() -> None:
    history = History(proven=frozenset(HONEST), banned=frozenset({"h0"}))
    picked = sample_for_evaluation([*HONEST, *SYBILS[:3]], 6, history, 0, 1)
    assert "h0" not in picked and set(picked) == {"h1", "h2", "h3", *SYBILS[:3]}
    assert "h0" in sample_for_evaluation([*HONEST, *SYBILS[:2]], 6, history, 0, 1)


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        sample_for_evaluation(["a", "a"], 1, History(), 0, 0)
    with pytest.raises(ValueError):
        SamplingConfig(bins=0)
    with pytest.raises(ValueError):
        SamplingConfig(unproven_share=1.5)


def test_an_identity_whose_updates_never_evaluate_waits_with_the_rest() -> None:
    """A review: a peer whose every submission ends without a score (a non-finite loss) stays
    'never evaluated' while its windows rated grow, and held the head of the first-come queue in
    every window. Its last submission was invalid: it waits with the rest."""
    history = History(proven=frozenset(HONEST), seen={"nan": 50, "new": 2}, failed=frozenset({"nan"}))
    picked = sample_for_evaluation([*HONEST, "nan", "new", *SYBILS[:20]], 6, history, 0, 5)
    assert "new" in picked and "nan" not in picked


def test_the_draw_reads_standing_from_the_ratings() -> None:
    """`history_of` (what the live round and bench_sampling both read): banned by the window, the
    proof's page-test z, and an identity never evaluated whose last submission was invalid."""
    ok = PeerRating("ok", 1, 25.0, 8.0, evaluations=3, proof_sum=6.0, proof_weight=4.0, last_evaluated=7)
    banned = PeerRating("banned", 2, 25.0, 8.0, ban_until=10)
    bad = PeerRating("bad", 3, 25.0, 8.0, gated=True, windows_seen=9)
    history = history_of({"ok": ok, "banned": banned, "bad": bad}, {"ok"}, 9)
    assert history.banned == {"banned"} and history_of({"banned": banned}, (), 10).banned == frozenset()
    assert history.evidence == {"ok": 3.0} and history.failed == {"bad"} and history.seen["bad"] == 9
    assert history.last_evaluated == {"ok": 7} and history.proven == {"ok"}


def test_a_copier_whose_record_a_penalty_wiped_waits_with_the_rest() -> None:
    """A copy penalty resets the rating (evaluations 0) and kept `windows_seen`: the copier was an
    identity "never evaluated" again, served first by how long it had been rated, and took a
    reserve slot in every window it copied, ahead of a newcomer registered after it. The reset now
    keeps the window it was last evaluated in, and the draw puts it with the rest."""
    cfg = RatingConfig()
    copier = PeerRating("copier", 7, cfg.mu, cfg.sigma, evaluations=2, windows_seen=30, last_evaluated=29)
    state = RatingState({"copier": copier}, 29)
    caught = PeerOutcome("copier", 7, Status.OK, score=0.01, indicator=1, copy_tier=CopyTier.RESET)
    after = update_ratings(state, 30, [caught], cfg).peers["copier"]
    assert after.evaluations == 0 and after.last_evaluated == 30 and after.windows_seen == 31
    newcomer = PeerRating("newcomer", 8, cfg.mu, cfg.sigma, windows_seen=3)
    history = history_of({"copier": after, "newcomer": newcomer, **{h: newcomer for h in HONEST}}, HONEST, 31)
    assert history.failed == {"copier"}
    # one reserve slot beside the proven peers: the newcomer's, in every window
    for w in range(31, 41):
        assert "newcomer" in sample_for_evaluation([*HONEST, "newcomer", "copier"], 5, history, w, 0)
