"""GET /v1/windows*, against the real app over a seeded Postgres database and Redis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from storage.db import session_scope
from storage.records import WeightSetRecord
from storage.writer import record_weight_set
from tests.api_fixtures import (
    N_PEERS,
    config_for,
    hotkey,
    run_server,
    seeded_database,
)


def test_windows_are_listed_newest_first_with_a_cursor(client: httpx.Client) -> None:
    page = client.get("/v1/windows", params={"limit": 2}).json()
    assert [(w["window"], w["state"]) for w in page["windows"]] == [(6, "open"), (5, "committed")]
    assert page["windows"][1]["n_submissions"] == N_PEERS and page["windows"][1]["n_evaluations"] == 3
    assert page["next_before"] == 5
    rest = client.get("/v1/windows", params={"before": page["next_before"]}).json()
    assert [w["window"] for w in rest["windows"]] == [4, 3, 2, 1]
    assert rest["next_before"] is None


def test_window_detail_has_every_decision(client: httpx.Client) -> None:
    body = client.get("/v1/windows/5").json()
    assert body["summary"]["state"] == "committed" and body["summary"]["committed_at"] is not None
    statuses = {s["hotkey"]: (s["status"], s["reason"]) for s in body["submissions"]}
    assert statuses[hotkey(N_PEERS - 1)] == ("invalid", "bad_signature")
    assert statuses[hotkey(N_PEERS - 2)] == ("missing", "missing")
    assert statuses[hotkey(0)] == ("ok", None)
    norms = {s["hotkey"]: (s["norm"], s["inflation"]) for s in body["submissions"]}
    assert norms[hotkey(0)] == (2.0, 0.9) and norms[hotkey(N_PEERS - 3)] == (2.0 + N_PEERS - 3, 1.6)
    assert norms[hotkey(N_PEERS - 1)] == (None, None)  # no valid update
    assert [e["hotkey"] for e in body["evaluations"]] == [hotkey(0), hotkey(1), hotkey(2)]
    assert body["copy_pairs"] == [
        {
            "hotkey_a": hotkey(0),
            "hotkey_b": hotkey(1),
            "overlap": 0.45,
            "sign_agreement": 0.9,
            "offender": hotkey(1),
            "similarity": 1.0,
            "baseline": 0.0,
            "clear": True,
            "authorship_a": 2.5,
            "authorship_b": 0.1,
        }
    ]
    assert [(s["role"], s["rank"]) for s in body["selection"]] == [
        ("gather", 0),
        ("gather", 1),
        ("reserve", 0),
    ]
    assert body["weight_sets"] == [
        {"window": 5, "block": 9000, "uids": [0, 1], "weights": [0.75, 0.25], "outcome": "ok", "error": None}
    ]
    assert len(body["ratings"]) == N_PEERS and "state" not in body["ratings"][0]
    first = next(r for r in body["ratings"] if r["uid"] == 0)
    assert (first["evaluations"], first["positives"], first["mean_margin"]) == (4, 3, 0.1)
    assert first["links"] == {hotkey(1): 0.12}
    assert first["claims"] == {hotkey(1): -1.5}  # whose update a tied pair sent (scoring/claims.py)
    assert first["claim_windows"] == {hotkey(1): 3}  # the windows that claim is the mean of
    assert first["retention"] == 0.97  # what the retention rule read (scoring/selection.py)
    assert (first["drift"], first["drift_similarity"]) == (0.006, 0.004)  # the persistence check's inputs
    assert first["proof_z"] == 2.0  # the page test's sum 3.0 over the root of its variance 2.25
    second = next(r for r in body["ratings"] if r["uid"] == 1)
    assert second["retention"] is None and second["drift_similarity"] is None  # never measured
    assert second["proof_z"] is None
    # what chain weights read: the last window that aggregated the peer (scoring/earnings.py)
    assert (first["last_aggregated"], second["last_aggregated"]) == (5, None)
    # the last window it played the rating match in (validator/round/rating.py `outside_match`)
    assert (first["last_matched"], second["last_matched"]) == (4, None)
    pages = [e["pages"] for e in body["evaluations"]]
    assert pages[0] == {"own_before": [5.0, 5.0], "own_after": [4.8, 5.0], "heldout_before": [5.0, 5.0]}
    assert pages[1:] == [None, None]
    assert second["drift"] == 0.0


def test_selection_pins_what_peers_aggregate(client: httpx.Client) -> None:
    body = client.get("/v1/windows/3/selection").json()
    assert body["state"] == "committed" and body["base_fingerprint"] == f"{3:064x}"
    first = body["peers"][0]
    assert (first["hotkey"], first["role"], first["rank"]) == (hotkey(0), "gather", 0)
    assert first["object_key"] == f"gauntlet/1/3/{hotkey(0)}.safetensors"
    assert first["payload_digest"] == f"{3:032x}{0:032x}" and first["etag"] == '"e3-0"'
    assert [p["role"] for p in body["peers"]] == ["gather", "gather", "reserve"]
    assert [p["weight"] for p in body["peers"]] == [0.6, 0.4, None]  # the outer step's coefficients
    assert body["clip_reference"] == {"b": 0.25, "w": 1.5}  # what each gathered update is clipped to


def test_committed_windows_are_cacheable_and_answer_304(client: httpx.Client) -> None:
    selection = client.get("/v1/windows/4/selection")
    assert selection.headers["cache-control"] == "public, max-age=31536000, immutable"
    detail = client.get("/v1/windows/4")
    assert detail.headers["cache-control"].startswith("public, max-age=")
    for response, path in ((selection, "/v1/windows/4/selection"), (detail, "/v1/windows/4")):
        again = client.get(path, headers={"If-None-Match": response.headers["etag"]})
        assert again.status_code == 304 and again.headers["etag"] == response.headers["etag"]


def test_an_open_window_is_not_cached_by_clients(client: httpx.Client) -> None:
    response = client.get("/v1/windows/6")
    assert response.json()["summary"]["state"] == "open"
    assert response.headers["cache-control"] == "no-cache"
    assert client.get("/v1/windows/6/selection").headers["cache-control"] == "no-cache"


@pytest.mark.parametrize("path", ["/v1/windows/7", "/v1/windows/0/selection", "/v1/windows/2147483647"])
def test_unknown_window_is_a_json_404(client: httpx.Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    assert response.json() == {
        "error": {"code": "not_found", "message": f"unknown window {path.split('/')[3]}"}
    }


@pytest.mark.parametrize(
    "path", ["/v1/windows/-1", "/v1/windows/abc", "/v1/windows/99999999999", "/v1/windows?limit=501"]
)
def test_bad_window_parameters_are_a_json_422(client: httpx.Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_parameter"


def test_unknown_route_is_a_json_404(client: httpx.Client) -> None:
    response = client.get("/v1/nothing")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


def test_weights_are_listed_newest_first(client: httpx.Client) -> None:
    body = client.get("/v1/weights").json()
    assert body == {
        "weight_sets": [
            {
                "window": 5,
                "block": 9000,
                "uids": [0, 1],
                "weights": [0.75, 0.25],
                "outcome": "ok",
                "error": None,
            }
        ],
        "next_before": None,
    }
    assert client.get("/v1/weights", params={"before": 5}).json()["weight_sets"] == []
    assert client.get("/v1/weights", params={"limit": 0}).status_code == 422


def test_trends_chart_every_committed_window(client: httpx.Client) -> None:
    windows = client.get("/v1/trends").json()["windows"]
    assert [t["window"] for t in windows] == [1, 2, 3, 4, 5]  # the open window 6 is not charted
    newest = windows[-1]
    assert newest["heldout_loss"] == 5.5 - 5 / 10  # the shared loss_rand_before of window 5
    assert newest["statuses"] == {"invalid": 1, "missing": 1, "ok": N_PEERS - 2}
    assert newest["timings"] == {"fetch": 1.5, "check": 0.5, "evaluate": 3.0, "commit": 0.25}
    assert (newest["n_selected"], newest["weight_outcomes"]) == (3, ["ok"])
    assert windows[0]["weight_outcomes"] == []
    assert [t["window"] for t in client.get("/v1/trends", params={"windows": 2}).json()["windows"]] == [4, 5]


def test_weight_pages_never_split_a_window(tmp_path: Path) -> None:
    db = seeded_database(f"sqlite:///{tmp_path}/weights.db")
    attempts = [(3, "ok"), (5, "failed"), (4, "ok"), (5, "ok")]  # a retry for window 5 came last
    with session_scope(db.engine) as session:
        for window, outcome in attempts:
            record_weight_set(session=session, record=WeightSetRecord(window, None, [0], [1.0], outcome))
    with run_server(config_for(db.url)) as server:

        def page(limit: int, before: int | None = None) -> dict[str, Any]:
            params = {"limit": limit} | ({} if before is None else {"before": before})
            body: dict[str, Any] = httpx.get(f"{server.base_url}/v1/weights", params=params).json()
            return body

        first = page(4)
        second = page(4, first["next_before"])
        alone = page(2)
    db.engine.dispose()
    shown = [(w["window"], w["outcome"], w["block"]) for w in first["weight_sets"]]
    # windows newest first, the latest attempt of a window first; window 4's attempt waits
    assert shown == [(5, "ok", None), (5, "failed", None), (5, "ok", 9000)]
    assert first["next_before"] == 5
    assert [(w["window"], w["outcome"]) for w in second["weight_sets"]] == [(4, "ok"), (3, "ok")]
    assert second["next_before"] is None
    # a window that fills a page alone is shown whole: paging never skips an attempt
    assert [w["window"] for w in alone["weight_sets"]] == [5, 5, 5] and alone["next_before"] == 5
