"""A thief that hides from the validator's polls cannot frame the peer it copied.

An unsighted peer's timestamp is its own store's Last-Modified: it may backdate it at will, so it
must never make a sighted peer the "later uploader" of a copy or a duplicate pair."""

from __future__ import annotations

import math

import numpy as np

from scoring.uniqueness import PeerPayload, find_copies, offences
from tests.uniqueness_fixtures import copy_of, random_update


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
    victim = PeerPayload("victim", "same", 10.0, victim_update, 2.0)
    thief = PeerPayload("thief", "same", 20.0, victim_update, 2.0)
    assert set(offences(find_copies([victim, thief], seed=1))) == {"thief"}
