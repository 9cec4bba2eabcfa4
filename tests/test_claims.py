"""A tied pair's claim to its update is read over the windows it was tied (scoring/claims.py)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest

from scoring.claims import ClaimBook, ClaimConfig, claim_gaps, update_claims
from scoring.ranking import PeerOutcome, PeerRating, RatingConfig, RatingState, Status, update_ratings
from scoring.selection import Candidate, select_aggregation
from scoring.twins import OWNERSHIP_MARGIN, Twins, judge_twins, owners
from scoring.uniqueness import CopyTier

CFG = ClaimConfig()
RATING = RatingConfig()
PAIR = [("thief", "victim")]


# the victim's own pages and the thief's, with the victim's update, over three windows it was tied
THREE_WINDOWS = [{"victim": 2.2, "thief": 0.2}, {"victim": 2.0, "thief": 0.2}, {"victim": 1.9, "thief": 0.1}]
NOW = {"victim": 0.8, "thief": 0.2}  # 0.6 this window: under the margin on its own


def _books(windows: list[dict[str, float]], tied: list[tuple[str, str]] = PAIR) -> list[ClaimBook]:
    """The claims after each window of page tests, the pair tied in every one."""
    book, out = ClaimBook(), []
    for page_t in windows:
        book = update_claims(book, tied, page_t, {}, CFG)
        out.append(book)
    return out


def test_a_pairs_claim_is_the_mean_of_its_windows_then_weighs_each_later_one_by_one_over_memory() -> None:
    gaps = [1.4, -0.1, 2.0, 1.0]  # the victim's pages over the thief's, window by window
    book, means = ClaimBook(), []
    for g in gaps:
        book = update_claims(book, PAIR, {"victim": g, "thief": 0.0}, {}, ClaimConfig(memory=3))
        means.append(book.mean["thief"]["victim"])
        assert book.mean["victim"]["thief"] == pytest.approx(-means[-1])  # both directions
    # the plain mean of the first three windows; the fourth weighs 1/3: 1.1 + (1.0 − 1.1) / 3
    assert means == pytest.approx([1.4, 0.65, 1.1, 1.1 - 0.1 / 3])
    assert book.windows == {"thief": {"victim": 4}, "victim": {"thief": 4}}


def test_the_second_window_reads_as_before_and_a_claim_stored_without_its_count_moves_by_half() -> None:
    """At any memory a pair's first two windows read as they did when every later window weighed ½;
    a claim stored then, without its count, counts one window, so its next one moves it by ½."""
    now = {"victim": 0.4, "thief": 0.5}
    for memory in (2, 8, 64):
        first = update_claims(
            ClaimBook(), PAIR, {"victim": 1.5, "thief": 0.1}, {}, ClaimConfig(memory=memory)
        )
        second = update_claims(first, PAIR, now, {}, ClaimConfig(memory=memory))
        assert second.mean["thief"]["victim"] == 1.4 + 0.5 * (-0.1 - 1.4)  # to the last digit
    stored = ClaimBook({"thief": {"victim": 1.4}, "victim": {"thief": -1.4}})
    assert update_claims(stored, PAIR, now, {}, CFG) == second


def test_a_pair_not_tied_or_not_evaluated_keeps_its_claim() -> None:
    book = update_claims(ClaimBook(), PAIR, {"victim": 1.5, "thief": 0.1}, {}, CFG)
    assert update_claims(book, [], {"victim": -3.0, "thief": 3.0}, {}, CFG) == book  # not tied
    assert update_claims(book, PAIR, {"victim": -3.0}, {}, CFG) == book  # the thief not evaluated
    other = update_claims(book, [("a", "b")], {"a": 1.0, "b": 0.0}, {}, CFG)
    assert other.mean["thief"] == book.mean["thief"] and other.mean["a"] == {"b": -1.0}
    assert other.windows["thief"] == {"victim": 1} and other.windows["a"] == {"b": 1}


def test_readings_make_each_direction_a_claim_of_its_own() -> None:
    """With each update read on the other's pages the gap is the smaller of the two (authorship.py),
    so x's claim under p is not minus p's under x."""
    readings = {("x", "p"): 0.2, ("p", "x"): 1.0}  # p's update reads 0.2 on x's pages, x's 1.0 on p's
    book = update_claims(ClaimBook(), [("x", "p")], {"x": 0.0, "p": 2.0}, readings, CFG)
    assert book.mean == {"x": {"p": pytest.approx(0.8)}, "p": {"x": pytest.approx(-2.0)}}


def test_a_crowd_of_partners_is_bounded_and_this_windows_partners_are_kept() -> None:
    cfg = ClaimConfig(max_partners=3)
    book = ClaimBook()
    for i in range(5):
        book = update_claims(book, [("v", f"c{i}")], {"v": 2.0, f"c{i}": float(i)}, {}, cfg)
    assert len(book.mean["v"]) == 3 and "c4" in book.mean["v"]
    assert book.windows["v"].keys() == book.mean["v"].keys()  # a count leaves with its claim
    with pytest.raises(ValueError):
        ClaimConfig(memory=0)
    with pytest.raises(ValueError):
        ClaimConfig(max_partners=0)


def test_claims_are_stored_with_the_rating_and_older_states_load_without_them() -> None:
    rating = PeerRating("v", 1, 25.0, 8.0, claims={"b": 0.5, "a": -1.0}, claim_windows={"b": 3, "a": 1})
    stored = rating.to_dict()
    assert list(stored["claims"]) == ["a", "b"] and PeerRating.from_dict(stored) == rating
    assert list(stored["claim_windows"]) == ["a", "b"]
    del stored["claim_windows"]
    assert PeerRating.from_dict(stored).claim_windows == {}
    del stored["claims"]
    assert PeerRating.from_dict(stored).claims == {}


def _twins(page_t: dict[str, float], history: list[dict[str, float]]) -> Twins:
    """The pair tied this window by one payload, with the claims of `history` and this window."""
    claims = _books([*history, page_t])[-1].mean
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
    history, now = THREE_WINDOWS[:2], NOW
    assert owners(PAIR, now) == set()
    assert owners(PAIR, now, claims=_twins(now, history).claims) == {"thief"}
    verdict = judge_twins({"thief", "victim"}, {"thief", "victim"}, lambda k: 1.0, _twins(now, history))
    assert verdict.disowned == {"thief"}


@pytest.mark.parametrize("tier", [CopyTier.RESET, CopyTier.BAN])
def test_a_copy_penalty_wipes_the_copiers_record_but_not_the_evidence_about_its_pairs(tier: CopyTier) -> None:
    """A copier caught by a clear finding is reset or banned. Wiping its claims too restarted its
    claim to the update it shares with its author at one window, so the pair's next tie read that
    window's page tests alone (and its links, which its partner's side restored)."""
    book = _books(THREE_WINDOWS)[-1]
    thief = PeerRating("thief", 0, 30.0, 2.0, links={"victim": 0.8})
    thief = replace(thief, claims=book.mean["thief"], claim_windows=book.windows["thief"])
    state = RatingState({"thief": thief}, 3)
    caught = update_ratings(state, 4, [PeerOutcome("thief", 0, Status.OK, 0.01, 1, copy_tier=tier)], RATING)
    after = caught.peers["thief"]
    assert (after.mu, after.sigma, after.evaluations) == (25.0, 25.0 / 3.0, 0)  # the record is wiped
    assert (after.claims, after.claim_windows, after.links) == (thief.claims, {"victim": 3}, {"victim": 0.8})
    kept = ClaimBook({"thief": after.claims, "victim": book.mean["victim"]}, {"thief": after.claim_windows})
    claim = update_claims(kept, PAIR, NOW, {}, CFG).mean["thief"]["victim"]
    assert claim == pytest.approx((2.0 + 1.8 + 1.8 + 0.6) / 4)  # the mean of four windows
    assert owners(PAIR, NOW, claims={("thief", "victim"): claim}) == {"thief"}


def test_a_sender_that_left_and_came_back_continues_from_its_partners_claim_reversed() -> None:
    """A copier reset for copying and quiet for three windows is dropped with its record; its author
    keeps its side (validator/round/pair_evidence.py). Back and tied again, the copier's claim
    continues from the author's, reversed, not from this window's page tests alone."""
    book, now = _books(THREE_WINDOWS)[-1], NOW
    left = ClaimBook({"victim": book.mean["victim"]}, {"victim": book.windows["victim"]})
    now = {"victim": 0.8, "thief": 0.2}
    back = update_claims(left, PAIR, now, {}, CFG)
    assert back == update_claims(book, PAIR, now, {}, CFG)  # one payload: as if it never left
    assert back.mean["thief"]["victim"] == pytest.approx(1.55) and back.windows["thief"] == {"victim": 4}
    assert owners(PAIR, now, claims={("thief", "victim"): back.mean["thief"]["victim"]}) == {"thief"}
    # with readings the two directions differ; the one reversed leans against the sender that left
    readings = {("thief", "victim"): 0.3, ("victim", "thief"): 1.9}
    full = update_claims(ClaimBook(), PAIR, {"victim": 2.2, "thief": 0.2}, readings, CFG)
    assert full.mean == {"thief": {"victim": pytest.approx(1.6)}, "victim": {"thief": -2.0}}
    reversed_only = ClaimBook({"victim": full.mean["victim"]}, {"victim": full.windows["victim"]})
    # the thief's own side read 1.6; reversed, the victim's reads 2.0: the mean of two, (2.0 + 0.6) / 2
    assert update_claims(reversed_only, PAIR, now, {}, CFG).mean["thief"]["victim"] == pytest.approx(1.3)


def _run(rng: random.Random, copies: int, author: tuple[float, float], memory: int | None) -> Counter[str]:
    """One simulated run of 8 windows: an author whose pages read N(`author`) a window and `copies`
    better rated senders of its update whose pages read N(0, 1) (scoring/twins.py
    `OWNERSHIP_MARGIN`). Counted per window: the author disowned, or ranked under a copy (`left
    out`), and a copy aggregated in its place; read by the claims at `memory`, or (None) by each
    window's page tests alone."""
    crowd = [f"c{i}" for i in range(copies)]
    tied = [("author", c) for c in crowd]
    everyone = {"author", *crowd}
    final = {"author": 1.0} | dict.fromkeys(crowd, 2.0)
    book, count = ClaimBook(), Counter[str]()
    for _ in range(8):
        page_t = {"author": rng.gauss(*author)} | {c: rng.gauss(0.0, 1.0) for c in crowd}
        gaps = {}
        if memory is not None:
            book = update_claims(book, tied, page_t, {}, ClaimConfig(memory=memory))
            gaps = claim_gaps(book.mean, tied, everyone)
        twins = Twins(copies=tuple(tied), same=tuple(tied), page_t=page_t, claims=gaps)
        v = judge_twins(everyone, everyone, final.__getitem__, twins)
        count["disowned"] += "author" in v.disowned
        count["left out"] += "author" in v.disowned | v.lesser
        count["copy kept"] += any(c not in v.disowned | v.lesser for c in crowd)
    return count


FULL, TENTH = (2.3, 1.4), (0.84, 1.19)  # a full honest peer's page test, and a ⅒-steps peer's


def _runs(copies: int, author: tuple[float, float], memory: int | None, n: int) -> Counter[str]:
    rng = random.Random(7)
    return sum((_run(rng, copies, author, memory) for _ in range(n)), Counter[str]())


def test_over_a_run_the_claims_disown_fewer_authors_and_keep_fewer_copiers() -> None:
    """400 simulated pairs over 8 windows, by each window's page tests alone and by the claims."""
    for author in (FULL, TENTH):
        alone, held = _runs(1, author, None, 400), _runs(1, author, CFG.memory, 400)
        assert held["disowned"] < alone["disowned"] / 2, (author, alone, held)
        assert held["copy kept"] < alone["copy kept"] * 0.75, (author, alone, held)
    assert OWNERSHIP_MARGIN == 1.0  # the rates above are read at this margin


def test_the_mean_over_the_pairs_windows_leaves_an_author_out_less_than_a_shorter_memory() -> None:
    """`copy_crowd` under seed 2 (benchmarks/bench_fidelity.py): a copy whose pages read 1.0 and
    more in three windows took its victim's place in window 7, the pair's claim, which weighed each
    later window ½, back at 0. Simulated, 200 runs of 8 windows, a pair and a crowd of eight: the
    plain mean over the pair's windows leaves the author out less often than weighing each later
    window ½ (`memory` 2), which leaves it out less often than each window alone."""
    for copies in (1, 8):
        for author in (FULL, TENTH):
            left = [_runs(copies, author, memory, 200)["left out"] for memory in (None, 2, CFG.memory)]
            assert left[0] > left[1] > left[2], (copies, author, left)
    assert CFG.memory == 8


def test_an_author_copied_by_a_crowd_stays_first_however_well_its_own_pages_read() -> None:
    """Eight identities send one author's update. Summed over the crowd, the correction of the
    author's standing counted its own t of this window against it once per copy: at 4.0, over its
    history of 1.2, it ranked under a copy reading 2.9 (the other copies, at 0.5, are disowned)."""
    copies = [f"c{i}" for i in range(8)]
    tied = [("author", c) for c in copies]
    history = [{"author": 1.2} | dict.fromkeys(copies, 0.5)] * 2
    now = {"author": 4.0} | dict.fromkeys(copies, 0.5) | {"c0": 2.9}
    book = ClaimBook()
    for page_t in [*history, now]:
        book = update_claims(book, tied, page_t, {}, CFG)
    twins = Twins(
        copies=tuple(tied), same=tuple(tied), page_t=now, claims=claim_gaps(book.mean, tied, set(now))
    )
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
    claims = update_claims(update_claims(ClaimBook(), tied, before, {}, CFG), tied, now, {}, CFG).mean
    twins = Twins(copies=tuple(tied), same=tuple(tied), page_t=now, claims=claim_gaps(claims, tied, set(now)))
    everyone = {"author", *copies}
    final = {"author": 1.0} | dict.fromkeys(copies, 2.0)
    verdict = judge_twins(everyone, everyone, final.__getitem__, twins)
    assert claims["author"]["c0"] < 0.0  # the pair's running claim: the author's
    assert "author" not in verdict.lesser | verdict.disowned and "c0" in verdict.lesser
