"""The API serves the evaluation workers each window recorded: in the window's detail and, for the
newest committed window, at /v1/workers (what the dashboard's Workers panel lists)."""

from __future__ import annotations

from pathlib import Path

import httpx

from storage.db import session_scope
from storage.writer import commit_window
from tests.api_fixtures import config_for, run_server, seeded_database, window_record
from tests.worker_fixtures import on_two_workers

W0 = {
    "name": "w0", "host": "gpu-a", "pid": 4242, "device": "cuda:0",
    "peers": 2, "seconds_per_peer": 1.5, "failures": 0,
}  # fmt: skip
W1 = {
    "name": "w1", "host": "gpu-b", "pid": 4343, "device": "cuda:0",
    "peers": 1, "seconds_per_peer": 1.25, "failures": 1,
}  # fmt: skip


def test_the_api_serves_each_windows_workers(tmp_path: Path) -> None:
    db = seeded_database(f"sqlite:///{tmp_path}/workers.db")  # windows 1-5 recorded no workers
    with session_scope(db.engine) as session:
        commit_window(session=session, record=on_two_workers(window_record(6)))
    with run_server(config_for(db.url)) as server, httpx.Client(base_url=server.base_url) as client:
        now = client.get("/v1/workers")
        six = client.get("/v1/windows/6").json()
        five = client.get("/v1/windows/5").json()
    db.engine.dispose()
    assert now.status_code == 200 and now.json() == {"window": 6, "workers": [W0, W1]}
    assert six["workers"] == [W0, W1]
    # the stage timings stay numbers per stage: the workers are their own field
    assert six["timings"] == dict(window_record(6).timings) and "evaluation_workers" not in six["timings"]
    assert five["workers"] == []


def test_before_any_commit_no_window_has_workers(tmp_path: Path) -> None:
    from storage.migrate import upgrade

    url = f"sqlite:///{tmp_path}/empty.db"
    upgrade(url)
    with run_server(config_for(url)) as server, httpx.Client(base_url=server.base_url) as client:
        body = client.get("/v1/workers").json()
    assert body == {"window": None, "workers": []}
