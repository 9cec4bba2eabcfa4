"""The archive keeps every submission forever only when the operator asks for it."""

from __future__ import annotations

import os

import pytest

from validator.settings import Settings


def test_archive_retention_is_bounded_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("GAUNTLET_")]:
        monkeypatch.delenv(key)
    s = Settings()
    assert s.archive_retention_windows > 0
    assert s.archive_retention_windows >= 2 * s.checkpoint_every  # the model stays rebuildable


def test_keeping_everything_is_an_explicit_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("GAUNTLET_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("GAUNTLET_ARCHIVE_RETENTION_WINDOWS", "0")
    assert Settings().archive_retention_windows == 0
