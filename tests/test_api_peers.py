"""GET /v1/peers*, against the real app over a seeded Postgres database and Redis."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest
from sqlalchemy import event

from api.peer_views import peer_detail, resolve_peer
from storage.db import make_engine, session_scope
from storage.migrate import upgrade
from storage.records import WindowRecord
from storage.writer import commit_window
from tests.api_fixtures import (
    N_PEERS,
    N_WINDOWS,
    SeededDb,
    config_for,
    hotkey,
    run_server,
    window_record,
)
from tests.storage_fixtures import PG_URL, create_pg_database, drop_pg_database


def test_ranking_lists_every_peer_best_first(client: httpx.Client) -> None:
    body = client.get("/v1/peers").json()
    assert body["window"] == 5 and body["total"] == N_PEERS
    peers = body["peers"]
    assert [p["hotkey"] for p in peers] == [hotkey(i) for i in range(N_PEERS)]
    assert [p["rank"] for p in peers] == [1, 2, 3, 4, 5, 6]
    top = peers[0]
    # window 5: mu = 25 + 6 + 0.5, sigma = 8 - 0.5, final = 6 + 0.05
    assert (top["uid"], top["mu"], top["sigma"], top["final_score"]) == (0, 31.5, 7.5, 6.05)
    assert top["ordinal"] == 31.5 - 3 * 7.5
    assert top["last_evaluated_window"] == 5 and peers[4]["last_evaluated_window"] is None
    assert [p["last_status"] for p in peers] == ["ok", "ok", "ok", "ok", "missing", "invalid"]


def test_ranking_sorts_and_paginates(client: httpx.Client) -> None:
    body = client.get("/v1/peers", params={"sort": "uid", "order": "desc", "limit": 2, "offset": 1}).json()
    assert [p["uid"] for p in body["peers"]] == [4, 3]
    assert (body["total"], body["limit"], body["offset"]) == (N_PEERS, 2, 1)
    by_ordinal = client.get("/v1/peers", params={"sort": "ordinal", "order": "asc"}).json()["peers"]
    assert [p["uid"] for p in by_ordinal] == [5, 4, 3, 2, 1, 0]
    assert client.get("/v1/peers", params={"offset": 100}).json()["peers"] == []


def test_a_peer_detail_reads_only_that_peers_rows(pg_db: SeededDb) -> None:
    """Loaded whole, 50 windows of a 256-sybil crowd took 27 s and 700 MB (every rating's links,
    every copy pair), for a request anyone can repeat with another peer."""
    statements: list[str] = []

    def seen(conn: object, cursor: object, statement: str, *rest: object) -> None:
        statements.append(statement)

    event.listen(pg_db.engine, "before_cursor_execute", seen)
    try:
        with session_scope(pg_db.engine) as s:
            summary = resolve_peer(s, hotkey(N_PEERS - 1))
            statements.clear()
            detail = peer_detail(s, summary, n_windows=50)
    finally:
        event.remove(pg_db.engine, "before_cursor_execute", seen)
    assert [w.window for w in detail.windows] == list(range(N_WINDOWS, 0, -1))
    assert not any("copy_pairs" in st for st in statements)
    assert len(statements) <= 8  # one read a table, not one a window


def test_uid_and_hotkey_name_the_same_peer(client: httpx.Client) -> None:
    by_uid = client.get("/v1/peers/1")
    by_hotkey = client.get(f"/v1/peers/{hotkey(1)}")
    assert by_uid.status_code == 200
    assert by_uid.json() == by_hotkey.json()
    assert by_uid.json()["rank"] == 2


def test_peer_detail_shows_its_newest_windows(client: httpx.Client) -> None:
    body = client.get(f"/v1/peers/{hotkey(N_PEERS - 1)}", params={"windows": 2}).json()
    assert [w["window"] for w in body["windows"]] == [5, 4]
    newest = body["windows"][0]
    assert (newest["status"], newest["reason"], newest["evaluation"], newest["selection"]) == (
        "invalid",
        "bad_signature",
        None,
        None,
    )
    assert newest["penalties"] == [
        {
            "hotkey": hotkey(N_PEERS - 1),
            "kind": "invalid",
            "multiplier": 0.0,
            "detail": "bad_signature",
            "until_window": None,
        }
    ]
    top = client.get("/v1/peers/0").json()["windows"][0]
    assert top["evaluation"]["score"] == 0.02 and top["evaluation"]["indicator"] == 1
    assert top["selection"] == {"hotkey": hotkey(0), "uid": 0, "role": "gather", "rank": 0}
    assert body["uid_history"] == [{"uid": N_PEERS - 1, "first_window": 1, "last_window": 5}]


def test_history_honours_the_window_range(client: httpx.Client) -> None:
    body = client.get("/v1/peers/0/history", params={"from_window": 2, "to_window": 4}).json()
    assert [p["window"] for p in body["points"]] == [2, 3, 4]
    assert body["points"][0]["final_score"] == 6.02
    assert [p["window"] for p in client.get("/v1/peers/0/history").json()["points"]] == [1, 2, 3, 4, 5]
    newest = client.get("/v1/peers/0/history", params={"limit": 2}).json()["points"]
    assert [p["window"] for p in newest] == [4, 5]
    assert client.get("/v1/peers/0/history", params={"from_window": 4}).json()["points"][0]["window"] == 4
    reversed_range = client.get("/v1/peers/0/history", params={"from_window": 4, "to_window": 2})
    assert reversed_range.status_code == 200 and reversed_range.json()["points"] == []


@pytest.mark.parametrize(
    "path",
    [
        "/v1/peers/nobody",
        "/v1/peers/999",
        "/v1/peers/99999999999999999999",
        "/v1/peers/%00",
        "/v1/peers/" + "x" * 500,
    ],
)
def test_unknown_peer_is_a_json_404(client: httpx.Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/peers", {"limit": 0}),
        ("/v1/peers", {"sort": "password"}),
        ("/v1/peers", {"offset": -1}),
        ("/v1/peers/0/history", {"to_window": "abc"}),
        ("/v1/peers/0", {"windows": 1000}),
    ],
)
def test_bad_parameters_are_a_json_422(client: httpx.Client, path: str, params: dict[str, object]) -> None:
    response = client.get(path, params=params)  # type: ignore[arg-type]
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_parameter" and error["message"]


def test_live_reads_revalidate_with_etags(client: httpx.Client) -> None:
    first = client.get("/v1/peers")
    assert first.headers["cache-control"] == "no-cache"
    again = client.get("/v1/peers", headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    assert client.get("/v1/peers", headers={"If-None-Match": '"other"'}).status_code == 200


def test_peers_can_be_filtered_by_status_and_hotkey_prefix(client: httpx.Client) -> None:
    ok = client.get("/v1/peers", params={"status": "ok"}).json()
    assert [p["uid"] for p in ok["peers"]] == [0, 1, 2, 3] and ok["total"] == 4
    # A filtered row keeps its place in the whole ranking.
    invalid = client.get("/v1/peers", params={"status": "invalid"}).json()["peers"]
    assert [(p["uid"], p["rank"]) for p in invalid] == [(N_PEERS - 1, N_PEERS)]
    one = client.get("/v1/peers", params={"hotkey_prefix": hotkey(2)[:-1] + "2"}).json()["peers"]
    assert [p["hotkey"] for p in one] == [hotkey(2)]
    both = client.get("/v1/peers", params={"status": "ok", "hotkey_prefix": "5Peer"}).json()
    assert both["total"] == 4
    assert client.get("/v1/peers", params={"hotkey_prefix": "nobody"}).json()["peers"] == []
    assert client.get("/v1/peers", params={"status": "OK; drop"}).status_code == 422
    assert all(p["label"] is None for p in ok["peers"])  # behaviours are known only in the demo


def test_peers_carry_and_filter_by_behaviour_where_known(pg_db: SeededDb) -> None:
    labels = ((hotkey(0), "honest"), (hotkey(5), "malformed"))
    with run_server(config_for(pg_db.url, peer_labels=labels)) as server:
        every = httpx.get(f"{server.base_url}/v1/peers").json()["peers"]
        honest = httpx.get(f"{server.base_url}/v1/peers", params={"label": "honest"}).json()["peers"]
    assert [p["label"] for p in every] == ["honest", None, None, None, None, "malformed"]
    assert [p["uid"] for p in honest] == [0]


def test_peer_detail_counts_the_peers_own_windows_across_a_gap() -> None:
    """A peer that left the subnet for windows 4-6 and came back: `windows=4` is its own four
    newest (8, 7, 3, 2), not the newest four windows overall, of which it was in two."""
    gone = hotkey(2)
    name = create_pg_database()
    url = PG_URL.format(name=name)
    upgrade(url)
    engine = make_engine(url)
    try:
        for w in range(1, 9):
            record = window_record(w)
            if 4 <= w <= 6:
                record = without(record, gone)
            with session_scope(engine) as s:
                commit_window(session=s, record=record)
        with session_scope(engine) as s:
            detail = peer_detail(s, resolve_peer(s, gone), n_windows=4)
        assert [w.window for w in detail.windows] == [8, 7, 3, 2]
        assert all(w.status == "ok" and w.rating is not None for w in detail.windows)
    finally:
        engine.dispose()
        drop_pg_database(name)


def without(record: WindowRecord, gone: str) -> WindowRecord:
    return replace(
        record,
        submissions=[r for r in record.submissions if r.hotkey != gone],
        evaluations=[r for r in record.evaluations if r.hotkey != gone],
        ratings=[r for r in record.ratings if r.hotkey != gone],
        penalties=[r for r in record.penalties if r.hotkey != gone],
        selections=[r for r in record.selections if r.hotkey != gone],
        copy_pairs=[p for p in record.copy_pairs if gone not in (p.hotkey_a, p.hotkey_b)],
    )
