"""The dashboard in a real headless Chromium: loads cleanly, shows the peers, draws the chart and
follows live events. Nothing may be fetched from anywhere but the API itself."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import redis

from storage.db import session_scope
from storage.writer import commit_window
from tests.api_fixtures import (
    N_PEERS,
    REDIS_URL,
    SeededDb,
    config_for,
    pg_db_fixture,
    redis_namespace,
    run_server,
    window_record,
)

__all__ = ["pg_db_fixture"]

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOT_ENV = "GAUNTLET_DASHBOARD_SCREENSHOT"  # set to a .png path to look at the page
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium package is not installed")
def test_dashboard_renders_and_follows_events(pg_db: SeededDb) -> None:
    from playwright.sync_api import expect, sync_playwright

    with (
        redis_namespace() as prefix,
        run_server(config_for(pg_db.url, prefix)) as server,
        sync_playwright() as p,
    ):
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        page = browser.new_page()
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        foreign: list[str] = []
        page.on("request", lambda r: None if r.url.startswith(server.base_url) else foreign.append(r.url))

        page.goto(server.base_url + "/")
        page.wait_for_selector("#leaderboard tbody tr:nth-child(6)")
        page.wait_for_selector("#chart path.series.score")
        page.wait_for_selector("#live.on")
        rows = page.locator("#leaderboard tbody tr")
        assert rows.count() == N_PEERS
        assert rows.nth(0).locator("td").nth(1).inner_text() == "0"
        assert page.locator("#board-window").inner_text() == "after window 5"
        path = page.locator("#chart path.series.ordinal").get_attribute("d") or ""
        assert path.startswith("M") and path.count("L") == 4  # five windows of history
        assert page.locator("#selection li").count() == 3
        assert "invalid" in page.locator("#submissions").inner_text()

        # A commit arrives: the page refreshes itself from the event stream.
        with session_scope(pg_db.engine) as session:
            commit_window(session=session, record=window_record(6))
        publisher = redis.Redis.from_url(REDIS_URL)
        publisher.publish(server.config.events_channel, json.dumps({"type": "window_committed", "window": 6}))
        publisher.close()
        # (The page's CSP forbids eval, so waits use locators, not wait_for_function.)
        expect(page.locator("#board-window")).to_have_text("after window 6")
        page.locator("#leaderboard tbody tr").nth(2).click()
        expect(page.locator("#chart-peer")).to_have_text("5Peer0…000002")
        expect(page.locator("#chart path.series.score")).to_have_attribute(
            "d", re.compile(r"^M[^M]*(L[^L]*){5}$")
        )
        if SCREENSHOT_ENV in os.environ:
            page.screenshot(path=os.environ[SCREENSHOT_ENV], full_page=True)
        browser.close()
    assert not problems, problems
    assert not foreign, foreign
