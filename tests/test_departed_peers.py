"""Peers that leave the rating state: a recycled uid, a ban that must outlive it, and what the
leaderboard and the API show of them afterwards."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from scoring.earnings import ranked_by_uid, with_aggregated
from scoring.ranking import DETACHED_UID, PeerOutcome, RatingConfig, RatingState, Status, update_ratings
from scoring.uniqueness import CopyTier
from storage.db import session_scope
from storage.queries import leaderboard, peer_summary
from storage.records import RatingRecord, WindowRecord
from storage.writer import commit_window
from tests.api_fixtures import (
    N_WINDOWS,
    SeededDb,
    config_for,
    hotkey,
    run_server,
    seeded_database,
    window_record,
)
from tests.storage_fixtures import PG_URL, create_pg_database, drop_pg_database

CFG = RatingConfig()
BAN = CFG.penalties.ban_windows


def ok(hotkey: str, uid: int, score: float = 0.01) -> PeerOutcome:
    return PeerOutcome(hotkey, uid, Status.OK, score, 1)


def _uids_are_unique(state: RatingState) -> None:
    held = [p.uid for p in state.peers.values() if p.uid != DETACHED_UID]
    assert len(held) == len(set(held)), held


def test_a_ban_outlives_the_uid_it_was_earned_on() -> None:
    """The copier is banned on uid 0, deregisters, a newcomer takes uid 0, and the copier comes back
    on uid 3: it must still be banned (dropping it with its uid forgot the ban)."""
    state = update_ratings(RatingState(), 1, [ok("cheat", 0), ok("b", 1)], CFG)
    state = update_ratings(
        state, 2, [PeerOutcome("cheat", 0, Status.OK, copy_tier=CopyTier.BAN), ok("b", 1)], CFG
    )
    ban_until = state.peers["cheat"].ban_until
    assert ban_until == 2 + BAN
    state = update_ratings(state, 3, [ok("newcomer", 0), ok("b", 1)], CFG)
    detached = state.peers["cheat"]
    assert (detached.uid, detached.ban_until, detached.final) == (DETACHED_UID, ban_until, 0.0)
    _uids_are_unique(state)
    assert RatingState.from_dict(json.loads(json.dumps(state.to_dict()))) == state  # replay reloads it
    state = update_ratings(state, 4, [ok("newcomer", 0), ok("b", 1)], CFG)  # still away: still held
    assert state.peers["cheat"].uid == DETACHED_UID
    back = update_ratings(state, 5, [ok("newcomer", 0), ok("b", 1), ok("cheat", 3, 0.5)], CFG)
    assert back.peers["cheat"].uid == 3 and back.peers["cheat"].ban_until == ban_until
    assert back.peers["cheat"].banned(5) and back.peers["cheat"].final == 0.0
    _uids_are_unique(back)
    # A detached peer is never paid, and weights name only uids that are held.
    paid = with_aggregated(state, {"cheat", "newcomer", "b"}, 4)
    assert all(uid >= 0 for uid, _ in ranked_by_uid(paid, 4, 1))


def test_a_hotkey_registered_again_under_another_uid_keeps_its_ban_and_its_pairs_evidence() -> None:
    """A new uid is a new record (rating, proof), but a copier must not shed the evidence about its
    pairs by registering again: its claim to its author's update would read one window
    (scoring/claims.py)."""
    from scoring.ranking import PeerRating

    cheat = PeerRating(
        "cheat", 0, 30.0, 2.0, ban_until=9, links={"b": 0.7}, claims={"b": 1.3}, claim_windows={"b": 4}
    )
    state = RatingState({"cheat": cheat}, 3)
    again = update_ratings(state, 4, [ok("cheat", 5), ok("b", 1)], CFG).peers["cheat"]
    assert (again.uid, again.mu, again.evaluations, again.ban_until) == (5, 25.0, 1, 9)  # this window only
    assert (again.links, again.claims, again.claim_windows) == ({"b": 0.7}, {"b": 1.3}, {"b": 4})
    quiet = state  # banned and quiet until its record is reset: the ban and the evidence stay
    for window in range(4, 4 + CFG.penalties.inactive_reset_windows):
        quiet = update_ratings(quiet, window, [ok("b", 1)], CFG)
    held = quiet.peers["cheat"]
    assert (held.mu, held.ban_until, held.claims, held.claim_windows) == (25.0, 9, {"b": 1.3}, {"b": 4})


def test_a_detached_peer_is_forgotten_when_its_ban_ends() -> None:
    banned = PeerOutcome("cheat", 0, Status.OK, copy_tier=CopyTier.BAN)
    state = update_ratings(RatingState(), 1, [banned], CFG)
    state = update_ratings(state, 2, [ok("newcomer", 0)], CFG)
    assert state.peers["cheat"].uid == DETACHED_UID
    end = state.peers["cheat"].ban_until
    state = update_ratings(state, end - 1, [ok("newcomer", 0)], CFG)
    assert "cheat" in state.peers
    state = update_ratings(state, end, [ok("newcomer", 0)], CFG)
    assert "cheat" not in state.peers
    # Unbanned, a peer whose uid is taken is simply gone (nothing to remember).
    plain = update_ratings(RatingState(), 1, [ok("a", 0)], CFG)
    assert set(update_ratings(plain, 2, [ok("z", 0)], CFG).peers) == {"z"}


NEW = "5NewHolder" + "0" * 38


def _recycled_window(window: int) -> WindowRecord:
    """uid 2 now belongs to NEW, its old holder kept detached (banned); peer 3 has left for good."""
    base = window_record(window)

    def renamed(rows: list, field: str = "hotkey") -> list:  # type: ignore[type-arg]
        return [dataclasses.replace(r, **{field: NEW}) if getattr(r, field) == hotkey(2) else r for r in rows]

    subs = [s for s in renamed(list(base.submissions)) if s.hotkey != hotkey(3)]
    ratings = [r for r in renamed(list(base.ratings)) if r.hotkey != hotkey(3)]
    detached = RatingRecord(hotkey(2), DETACHED_UID, 25.0, 25 / 3, 0.0, 0.0, state={"ban_until": 99})
    return dataclasses.replace(
        base,
        submissions=subs,
        evaluations=renamed(list(base.evaluations)),
        ratings=[*ratings, detached],
        selections=renamed(list(base.selections)),
    )


@pytest.fixture(name="recycled_db", scope="module")
def recycled_db_fixture() -> Iterator[SeededDb]:
    name = create_pg_database()
    db = seeded_database(PG_URL.format(name=name))
    try:
        with session_scope(db.engine) as s:
            commit_window(session=s, record=_recycled_window(N_WINDOWS + 1))
        yield db
    finally:
        db.engine.dispose()
        drop_pg_database(name)


def test_the_leaderboard_lists_only_the_peers_of_the_newest_state(recycled_db: SeededDb) -> None:
    with session_scope(recycled_db.engine) as s:
        board = leaderboard(session=s)
        departed = peer_summary(session=s, hotkey=hotkey(2))
    assert [e.hotkey for e in board] == [hotkey(0), hotkey(1), NEW, hotkey(4), hotkey(5)]
    assert [e.rank for e in board] == [1, 2, 3, 4, 5]
    # The detached rating keeps the uids the hotkey really held.
    assert departed is not None and departed.uid == 2 and [u for u, _, _ in departed.uid_history] == [2]


def test_the_api_names_a_recycled_uids_new_holder(recycled_db: SeededDb) -> None:
    with run_server(config_for(recycled_db.url)) as server, httpx.Client(base_url=server.base_url) as client:
        listed = client.get("/v1/peers").json()
        by_uid = client.get("/v1/peers/2").json()
        left = client.get("/v1/peers/3")
        old = client.get(f"/v1/peers/{hotkey(2)}").json()
    assert listed["total"] == 5 and hotkey(2) not in {p["hotkey"] for p in listed["peers"]}
    assert hotkey(3) not in {p["hotkey"] for p in listed["peers"]}
    assert (by_uid["hotkey"], by_uid["rank"]) == (NEW, 3)
    assert left.status_code == 404  # nobody holds uid 3 now
    assert old["rank"] is None and old["uid"] == 2 and old["rating"]["uid"] == DETACHED_UID


def test_links_to_a_detached_peer_are_dropped_and_claims_about_a_departed_one_are_kept() -> None:
    """A detached peer submits nothing, so its links never move again: kept, its partner would stay
    linked (out of the residual consensus) until the ban ended. Claims are read only when the pair
    is tied again, and one dropped with the peer's record let a copier come back (quiet for three
    windows, or detached and registered again) to a claim of one window (scoring/claims.py)."""
    from scoring.ranking import PeerRating
    from scoring.uniqueness import CopyCheck
    from validator.round.pair_evidence import with_pair_evidence
    from validator.round.rating import RankingConfig

    def rate(*peers: PeerRating) -> RatingState:
        state, cfg = RatingState({p.hotkey: p for p in peers}, 5), RankingConfig()
        return with_pair_evidence(state, CopyCheck([]), [], cfg.links, cfg.claims)

    partner = PeerRating(
        "partner", 0, 25.0, 8.0, links={"cheat": 0.9}, claims={"cheat": -1.2}, claim_windows={"cheat": 3}
    )
    cheat = PeerRating("cheat", 1, 25.0, 8.0, ban_until=99, links={"partner": 0.9}, claims={"partner": 1.2})
    kept = rate(partner, cheat).peers["partner"]  # both registered: kept
    assert kept.links == {"cheat": 0.9} and kept.claims == {"cheat": -1.2}
    assert kept.claim_windows == {"cheat": 3}  # a claim keeps its count while not tied
    out = rate(partner, dataclasses.replace(cheat, uid=DETACHED_UID))
    assert out.peers["partner"].links == {} and out.peers["cheat"].links == {}
    assert (out.peers["partner"].claims, out.peers["partner"].claim_windows) == (
        {"cheat": -1.2},
        {"cheat": 3},
    )
    assert out.peers["cheat"].claims == {"partner": 1.2}
    gone = rate(partner).peers["partner"]  # the cheat's record dropped (quiet, not banned)
    assert (gone.links, gone.claims, gone.claim_windows) == ({}, {"cheat": -1.2}, {"cheat": 3})


def test_a_window_whose_state_holds_nobody_empties_the_leaderboard(tmp_path: Path) -> None:
    """Every peer gone: the newest committed window writes no rating, and the board must not fall
    back to the previous window's peers (it keyed on the newest rating row before)."""
    db = seeded_database(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        with session_scope(db.engine) as s:
            assert len(leaderboard(session=s)) > 0
            gone = {f: [] for f in ("submissions", "evaluations", "ratings", "selections", "penalties")}
            empty = dataclasses.replace(window_record(N_WINDOWS + 1), copy_pairs=[], **gone)
            commit_window(session=s, record=empty)
        with session_scope(db.engine) as s:
            assert leaderboard(session=s) == []
            assert peer_summary(session=s, hotkey=hotkey(0)) is not None  # its detail stays
    finally:
        db.engine.dispose()
