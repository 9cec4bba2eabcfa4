"""A peer's download budget is the operator's to size: at the run's scale a 2 GB submission needs
more than the 30 s that suits the demo, and never more than the whole fetch deadline."""

from __future__ import annotations

import os

import pytest

from validator.settings import Settings
from validator.stores.commitments import LocationPolicy
from validator.wiring import fetch_config


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("GAUNTLET_")]:
        monkeypatch.delenv(key)


def test_default_budget_is_a_quarter_of_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAUNTLET_FETCH_DEADLINE_S", "600")
    assert fetch_config(Settings(), 1 << 20, LocationPolicy.local()).peer_budget_s == 150.0


def test_an_explicit_budget_is_used_but_never_past_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAUNTLET_FETCH_DEADLINE_S", "600")
    monkeypatch.setenv("GAUNTLET_FETCH_PEER_BUDGET_S", "90")
    assert fetch_config(Settings(), 1 << 20, LocationPolicy.local()).peer_budget_s == 90.0
    monkeypatch.setenv("GAUNTLET_FETCH_PEER_BUDGET_S", "900")
    assert fetch_config(Settings(), 1 << 20, LocationPolicy.local()).peer_budget_s == 600.0
