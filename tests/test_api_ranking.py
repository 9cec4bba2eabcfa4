"""One ranking rule everywhere (final score, then the last aggregated window, then ordinal
mu - 3 sigma, then uid): the API's /v1/peers, the demo's CLI table and (tests/test_dashboard.py) the
dashboard agree on peers tied at final score 0, where ordering by hotkey once put an invalid peer
above ok ones, and ordering by ordinal put peers the aggregate left out above aggregated work."""

from __future__ import annotations

from pathlib import Path

import httpx

from scoring.ranking import PeerRating, RatingState
from storage.ranking import rank_key
from tests.api_fixtures import AGGREGATED, TIED, TIED_ORDER, config_for, run_server, tied_database
from validator.demo.summary import DemoSummary, leaderboard_lines


def test_the_api_ranks_ties_by_ordinal_then_uid(tmp_path: Path) -> None:
    db = tied_database(f"sqlite:///{tmp_path}/tied.db")
    with run_server(config_for(db.url)) as server:
        peers = httpx.get(f"{server.base_url}/v1/peers").json()["peers"]
        detail = httpx.get(f"{server.base_url}/v1/peers/0").json()
        by_uid = httpx.get(f"{server.base_url}/v1/peers", params={"sort": "uid"}).json()["peers"]
    db.engine.dispose()
    assert [p["uid"] for p in peers] == TIED_ORDER
    assert [p["rank"] for p in peers] == [1, 2, 3, 4, 5, 6]
    assert detail["rank"] == 6  # the invalid peer, whose hotkey sorts first, ranks last
    assert {p["uid"]: p["rank"] for p in by_uid} == {uid: i + 1 for i, uid in enumerate(TIED_ORDER)}


def test_the_cli_table_ranks_like_the_api() -> None:
    state = RatingState(
        {
            hk: PeerRating(hk, uid, mu, sigma, bma=0.1, final=final, last_aggregated=AGGREGATED.get(uid))
            for uid, hk, final, mu, sigma in TIED
        },
        window=1,
    )
    peers = DemoSummary({}).peers(state)
    assert [p["uid"] for p in peers] == TIED_ORDER
    lines = leaderboard_lines(peers)
    assert [int(line.split()[1]) for line in lines[1:]] == TIED_ORDER
    assert [int(line.split()[0]) for line in lines[1:]] == [1, 2, 3, 4, 5, 6]


def test_the_cli_table_counts_the_windows_that_aggregated_each_peer() -> None:
    """A proven peer at an ordinal ≤ 0 has a final score of 0 like a cheater's; the table's `agg`
    column says how many of the run's windows aggregated it."""
    state = RatingState(
        {
            "a": PeerRating("a", 1, 24.0, 8.0, final=0.0, last_aggregated=3),
            "b": PeerRating("b", 2, 25.0, 25 / 3),
        },
        window=3,
    )
    summary = DemoSummary({"a": "honest", "b": "lazy"})
    for window, selected in ((1, []), (2, ["a"]), (3, ["a"])):
        summary.windows.append({"window": window, "selected": selected})
    peers = summary.peers(state)
    assert [(p["hotkey"], p["aggregated_windows"]) for p in peers] == [("a", 2), ("b", 0)]
    lines = leaderboard_lines(peers)
    assert lines[0].split()[-1] == "agg"
    assert [line.split()[-1] for line in lines[1:]] == ["2", "0"]


def test_rank_key_is_final_then_aggregated_then_ordinal_then_uid() -> None:
    assert rank_key(1.0, 0.0, 10.0, 9) < rank_key(0.0, 50.0, 1.0, 0, "", 7)  # final first
    assert rank_key(0.0, 10.0, 8.0, 9, "", 7) < rank_key(0.0, 50.0, 1.0, 0)  # then aggregated work
    assert rank_key(0.0, 10.0, 8.0, 9, "", 7) < rank_key(0.0, 50.0, 1.0, 0, "", 6)  # the more recent
    assert rank_key(0.0, 30.0, 8.0, 9) < rank_key(0.0, 14.0, 25 / 3, 0)  # then ordinal
    assert rank_key(0.0, 30.0, 8.0, 2, "5Z") < rank_key(0.0, 30.0, 8.0, 3, "5A")  # then uid, not hotkey
