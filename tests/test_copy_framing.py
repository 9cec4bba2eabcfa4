"""A thief that hides from the validator's polls cannot frame the peer it copied.

An unsighted peer's timestamp is its own store's Last-Modified: it may backdate it at will, so it
must never make a sighted peer the "later uploader" of a copy or a duplicate pair."""

from __future__ import annotations

import math

import numpy as np

from scoring.ranking import RatingState
from scoring.selection import Candidate, select_aggregation
from scoring.uniqueness import PeerPayload, examine_copies, find_copies, offences
from tests.uniqueness_fixtures import copy_of, random_update
from validator.round.rating import RankingConfig, twins_of


def test_unsighted_backdated_duplicate_frames_nobody() -> None:
    rng = np.random.default_rng(11)
    victim_update = random_update(rng)
    victim = PeerPayload("victim", "same", 10.0, victim_update, 2.0)  # sighted by our polls
    thief = PeerPayload("thief", "same", 0.001, victim_update, math.inf)  # forged Last-Modified only
    found = find_copies([victim, thief], seed=1)
    assert found, "the identical pair is still reported"
    assert all(not f.clear for f in found)
    assert offences(found) == {}


def test_unsighted_backdated_near_copy_frames_nobody() -> None:
    rng = np.random.default_rng(12)
    victim_update, own = random_update(rng), random_update(rng)
    stolen = copy_of(victim_update, own, 0.7, rng)
    victim = PeerPayload("victim", "dv", 10.0, victim_update, 2.0)
    thief = PeerPayload("thief", "dt", 0.001, stolen, math.inf)
    found = find_copies([victim, thief], seed=1)
    assert offences(found) == {}


def test_two_sightings_still_decide_the_offender() -> None:
    rng = np.random.default_rng(13)
    victim_update = random_update(rng)
    victim = PeerPayload("victim", "same", 10.0, victim_update, 2.0, proven=True)
    thief = PeerPayload("thief", "same", 20.0, victim_update, 2.0)
    assert set(offences(find_copies([victim, thief], seed=1))) == {"thief"}


def test_a_backdated_unsighted_twin_does_not_shield_a_copier_seen_later() -> None:
    """The group of equal payloads was anchored on its earliest timestamp, a forged Last-Modified
    here: every pair was then unclear and the copier, seen 20 s after its victim, went free."""
    rng = np.random.default_rng(5)
    stolen = random_update(rng)
    honest = [PeerPayload(f"h{i}", f"d{i}", 5.0, random_update(rng), 2.0, proven=True) for i in range(4)]
    victim = PeerPayload("victim", "same", 10.0, stolen, 2.0, proven=True)
    copier = PeerPayload("copier", "same", 30.0, stolen, 2.0)
    accomplice = PeerPayload("acc", "same", 0.001, stolen, math.inf)
    worst = offences(find_copies([*honest, victim, copier, accomplice], seed=1))
    assert set(worst) == {"copier"} and worst["copier"].other == "victim"


def _twin_selection(thief: str, victim: str, thief_final: float, victim_final: float) -> tuple[str, ...]:
    """A thief re-signs the victim's bytes from a store that hides from the polls: the pair is
    unclear (nobody penalised) and at most one of the two is aggregated."""
    rng = np.random.default_rng(7)
    stolen = random_update(rng)
    honest = [PeerPayload(f"h{i}", f"d{i}", 5.0, random_update(rng), 2.0) for i in range(4)]
    pair = [PeerPayload(victim, "dv", 10.0, stolen, 2.0), PeerPayload(thief, "dv", 0.001, stolen, math.inf)]
    copies = examine_copies([*honest, *pair], seed=3)
    assert offences(copies.findings) == {}
    twins = twins_of(RatingState({}, 0), copies, RankingConfig())
    finals = {f"h{i}": 10.0 for i in range(4)} | {victim: victim_final, thief: thief_final}
    cands = [Candidate(k, f, True, 0.01, 1, mass=1.0, inflation=1.0) for k, f in finals.items()]
    return select_aggregation(cands, RankingConfig().selection, twins).gather


def test_of_an_unclear_pair_the_peer_the_validator_saw_is_kept() -> None:
    """The better-rated member was kept, then the hotkey that sorts first: a well-rated thief, or
    one with a hotkey chosen to sort first, took the aggregation slot (and the pay) of its victim."""
    kept = _twin_selection("thief", "victim", 12.0, 8.0)
    assert "victim" in kept and "thief" not in kept
    tied = _twin_selection("5Aaa", "5Zzz", 8.0, 8.0)
    assert "5Zzz" in tied and "5Aaa" not in tied


def test_a_first_upload_frames_nobody_unless_proven_before_an_unproven_one() -> None:
    """A red-team run: an honest update's inputs are public (the base, the assigned pages, the
    recipe), so an identity computed a proven victim's update and published it 4 s before it; the
    victim, seen later, was rejected as the duplicate and banned in every window. Begun in the
    victim's warm-up (both unproven) it kept the victim unevaluated, so never proven. The order names
    an offender only when the first uploader is proven and the later one is not."""
    rng = np.random.default_rng(13)
    update = random_update(rng)
    victim = PeerPayload("victim", "same", 10.0, update, 1.0, proven=True)
    early = PeerPayload("early", "same", 6.0, update, 1.0)
    for found in (find_copies([victim, early], seed=1), find_copies([victim, early, *_others(rng)], seed=1)):
        assert found and offences(found) == {}, found
    near = PeerPayload("early", "near", 6.0, copy_of(update, random_update(rng), 0.8, rng), 1.0)
    assert offences(find_copies([victim, near, *_others(rng)], seed=1)) == {}
    # unproven alike (the victim in its warm-up): unclear, whoever uploaded first
    newcomer = PeerPayload("victim", "same", 10.0, update, 1.0)
    for found in (
        find_copies([newcomer, early], seed=1),
        find_copies([newcomer, early, *_others(rng)], seed=1),
    ):
        assert found and offences(found) == {}, found
    # proven alike (`frontrun_proven`): unclear too; a proven first upload decides against an
    # unproven later one only (a copier of a proven peer; and, still, a frontrunner's newcomer victim)
    proven_early = PeerPayload("early", "same", 6.0, update, 1.0, proven=True)
    alike = find_copies([victim, proven_early], seed=1)
    assert alike and not offences(alike)
    assert set(offences(find_copies([newcomer, proven_early], seed=1))) == {"victim"}


def _others(rng: np.random.Generator) -> list[PeerPayload]:
    return [PeerPayload(f"o{i}", f"do{i}", 1.0 + i, random_update(rng), 1.0, proven=True) for i in range(3)]
