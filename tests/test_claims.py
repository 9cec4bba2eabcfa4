"""A tied pair's claim to its update is read over the windows it was tied (scoring/claims.py)."""

from __future__ import annotations

import random

import pytest

from scoring.claims import ClaimConfig, claim_gaps, update_claims
from scoring.ranking import PeerRating
from scoring.selection import Candidate, select_aggregation
from scoring.twins import OWNERSHIP_MARGIN, Twins, judge_twins, owners

CFG = ClaimConfig()
PAIR = [("thief", "victim")]


def _fold(
    windows: list[dict[str, float]], tied: list[tuple[str, str]] = PAIR
) -> list[dict[str, dict[str, float]]]:
    """The claims after each window of page tests, the pair tied in every one."""
    claims: dict[str, dict[str, float]] = {}
    out = []
    for page_t in windows:
        claims = update_claims(claims, tied, page_t, {}, CFG)
        out.append(claims)
    return out


def test_a_pairs_claim_is_its_first_gap_then_a_running_mean_in_both_directions() -> None:
    first, second = _fold([{"victim": 1.5, "thief": 0.1}, {"victim": 0.4, "thief": 0.5}])
    assert first == {"thief": {"victim": pytest.approx(1.4)}, "victim": {"thief": pytest.approx(-1.4)}}
    # 1.4 + 0.5 × (−0.1 − 1.4)
    assert second["thief"]["victim"] == pytest.approx(0.65) and second["victim"]["thief"] == pytest.approx(
        -0.65
    )


def test_a_pair_not_tied_or_not_evaluated_keeps_its_claim() -> None:
    claims = _fold([{"victim": 1.5, "thief": 0.1}])[-1]
    assert update_claims(claims, [], {"victim": -3.0, "thief": 3.0}, {}, CFG) == claims  # not tied
    assert update_claims(claims, PAIR, {"victim": -3.0}, {}, CFG) == claims  # the thief not evaluated
    other = update_claims(claims, [("a", "b")], {"a": 1.0, "b": 0.0}, {}, CFG)
    assert other["thief"] == claims["thief"] and other["a"] == {"b": -1.0}


def test_readings_make_each_direction_a_claim_of_its_own() -> None:
    """With each update read on the other's pages the gap is the smaller of the two (authorship.py),
    so x's claim under p is not minus p's under x."""
    readings = {("x", "p"): 0.2, ("p", "x"): 1.0}  # p's update reads 0.2 on x's pages, x's 1.0 on p's
    claims = update_claims({}, [("x", "p")], {"x": 0.0, "p": 2.0}, readings, CFG)
    assert claims == {"x": {"p": pytest.approx(0.8)}, "p": {"x": pytest.approx(-2.0)}}


def test_a_crowd_of_partners_is_bounded_and_this_windows_partners_are_kept() -> None:
    cfg = ClaimConfig(max_partners=3)
    claims: dict[str, dict[str, float]] = {}
    for i in range(5):
        claims = update_claims(claims, [("v", f"c{i}")], {"v": 2.0, f"c{i}": float(i)}, {}, cfg)
    assert len(claims["v"]) == 3 and "c4" in claims["v"]
    with pytest.raises(ValueError):
        ClaimConfig(rate=0.0)
    with pytest.raises(ValueError):
        ClaimConfig(max_partners=0)


def test_claims_are_stored_with_the_rating_and_older_states_load_without_them() -> None:
    rating = PeerRating("v", 1, 25.0, 8.0, claims={"b": 0.5, "a": -1.0})
    stored = rating.to_dict()
    assert list(stored["claims"]) == ["a", "b"] and PeerRating.from_dict(stored) == rating
    del stored["claims"]
    assert PeerRating.from_dict(stored).claims == {}


def _twins(page_t: dict[str, float], history: list[dict[str, float]]) -> Twins:
    """The pair tied this window by one payload, with the claims of `history` and this window."""
    claims = _fold([*history, page_t])[-1]
    others = {f"h{i}": 2.0 for i in range(3)}
    gaps = claim_gaps(claims, PAIR, set(page_t))
    return Twins(copies=tuple(PAIR), same=tuple(PAIR), page_t=page_t | others, claims=gaps)


# `frontrun_proven` under seed 1 (benchmarks/bench_fidelity.py): the victim's own pages and the
# frontrunner's, each with the victim's update, in windows 4-6
FRONTRUN_SEED_1 = [{"victim": 1.511, "thief": 0.067}, {"victim": 1.675, "thief": 1.359}]
WINDOW_6 = {"victim": 0.41, "thief": 0.438}


def test_an_author_whose_pages_read_just_under_its_frontrunners_once_is_kept_by_its_history() -> None:
    """Window 6 of `frontrun_proven` under seed 1: by that window's page tests alone the frontrunner,
    better rated, was aggregated in its victim's place (coverage 0.75)."""
    cands = [Candidate(f"h{i}", 10.0, True, 0.01, 1, mass=1.0, inflation=1.0) for i in range(3)]
    cands += [Candidate("thief", 20.0, True, 0.01, 1, mass=1.0, inflation=1.0)]
    cands += [Candidate("victim", 5.0, True, 0.01, 1, mass=1.0, inflation=1.0)]
    chosen = select_aggregation(cands, twins=_twins(WINDOW_6, FRONTRUN_SEED_1)).gather
    assert "victim" in chosen and "thief" not in chosen
    alone = _twins(WINDOW_6, [])  # the pair's first window: the page tests alone decide, as before
    chosen = select_aggregation(cands, twins=alone).gather
    assert "thief" in chosen and "victim" not in chosen


def test_a_copier_is_disowned_by_its_claim_over_the_windows_not_one() -> None:
    history = [{"victim": 2.2, "thief": 0.2}, {"victim": 2.0, "thief": 0.2}]
    now = {"victim": 0.8, "thief": 0.2}  # 0.6 this window: under the margin on its own
    assert owners(PAIR, now) == set()
    assert owners(PAIR, now, claims=_twins(now, history).claims) == {"thief"}
    verdict = judge_twins({"thief", "victim"}, {"thief", "victim"}, lambda k: 1.0, _twins(now, history))
    assert verdict.disowned == {"thief"}


def test_over_a_run_the_running_claim_disowns_fewer_authors_and_keeps_fewer_copiers() -> None:
    """Simulated pairs of one update, the copier better rated: its author's pages read 2.3 ± 1.4 a
    window (a full honest peer) or 0.84 ± 1.19 (⅒ steps), its copier's N(0, 1) (scoring/twins.py
    `OWNERSHIP_MARGIN`). Counted over 8 windows of 400 pairs each: the author disowned, and the
    copier aggregated in its place, by each window's page tests alone and with the claims."""
    rng = random.Random(7)
    pair = [("author", "copier")]
    for mean, spread in ((2.3, 1.4), (0.84, 1.19)):
        alone = {"disowned": 0, "copier kept": 0}
        held = dict(alone)
        for _ in range(400):
            claims: dict[str, dict[str, float]] = {}
            for _ in range(8):
                page_t = {"author": rng.gauss(mean, spread), "copier": rng.gauss(0.0, 1.0)}
                claims = update_claims(claims, pair, page_t, {}, CFG)
                gaps = claim_gaps(claims, pair, set(page_t))
                for count, read in ((alone, {}), (held, gaps)):
                    twins = Twins(copies=tuple(pair), same=tuple(pair), page_t=page_t, claims=read)
                    final = {"author": 1.0, "copier": 2.0}
                    v = judge_twins({"author", "copier"}, {"author", "copier"}, final.__getitem__, twins)
                    count["disowned"] += "author" in v.disowned
                    count["copier kept"] += "copier" not in v.disowned | v.lesser
        assert held["disowned"] < alone["disowned"] / 2, (mean, alone, held)
        assert held["copier kept"] < alone["copier kept"] * 0.75, (mean, alone, held)
    assert OWNERSHIP_MARGIN == 1.0  # the rates above are read at this margin


def test_an_author_copied_by_a_crowd_stays_first_however_well_its_own_pages_read() -> None:
    """Eight identities send one author's update. Summed over the crowd, the correction of the
    author's standing counted its own t of this window against it once per copy: at 4.0, over its
    history of 1.2, it ranked under a copy reading 2.9 (the other copies, at 0.5, are disowned)."""
    copies = [f"c{i}" for i in range(8)]
    tied = [("author", c) for c in copies]
    history = [{"author": 1.2} | dict.fromkeys(copies, 0.5)] * 2
    now = {"author": 4.0} | dict.fromkeys(copies, 0.5) | {"c0": 2.9}
    claims: dict[str, dict[str, float]] = {}
    for page_t in [*history, now]:
        claims = update_claims(claims, tied, page_t, {}, CFG)
    twins = Twins(copies=tuple(tied), same=tuple(tied), page_t=now, claims=claim_gaps(claims, tied, set(now)))
    everyone = {"author", *copies}
    final = {"author": 1.0} | dict.fromkeys(copies, 2.0)
    verdict = judge_twins(everyone, everyone, final.__getitem__, twins)
    assert verdict.disowned == set(copies) - {"c0"}
    assert "author" not in verdict.lesser and "c0" in verdict.lesser


def test_in_a_crowd_each_pair_orders_its_author_and_copy_by_its_own_claim() -> None:
    """Its record against one lucky copy decides, not its record against the other seven: moved by
    the mean over its eight partners, the author (2.0 this window) ranked under a copy reading 2.4
    that it had read 2.0 over the window before, because the seven others, level with it then,
    read 0.0 now (`copy_crowd` under seed 2, window 7, a copy aggregated in its victim's place)."""
    copies = [f"c{i}" for i in range(8)]
    tied = [("author", c) for c in copies]
    before = {"author": 2.0} | dict.fromkeys(copies, 2.0) | {"c0": 0.0}
    now = {"author": 2.0} | dict.fromkeys(copies, 0.0) | {"c0": 2.4}
    claims = update_claims(update_claims({}, tied, before, {}, CFG), tied, now, {}, CFG)
    twins = Twins(copies=tuple(tied), same=tuple(tied), page_t=now, claims=claim_gaps(claims, tied, set(now)))
    everyone = {"author", *copies}
    final = {"author": 1.0} | dict.fromkeys(copies, 2.0)
    verdict = judge_twins(everyone, everyone, final.__getitem__, twins)
    assert claims["author"]["c0"] < 0.0  # the pair's running claim: the author's
    assert "author" not in verdict.lesser | verdict.disowned and "c0" in verdict.lesser
