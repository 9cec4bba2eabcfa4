"""A window whose rating stage keeps raising is still committed in salvage, never retried forever."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import validator.round as round_module
from validator.demo import DemoConfig, DemoRunner
from validator.round import run_window
from validator.sim.plugins import parse_peers


def test_a_rating_stage_that_raises_is_skipped_in_a_salvaged_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith("GAUNTLET_")]:
        monkeypatch.delenv(key)  # restored after the test, unlike a bare del
    cfg = DemoConfig(parse_peers("honest:2"), workdir=tmp_path / "d", inner_steps=2, corpus_tokens=100_000)
    runner = DemoRunner(cfg)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ArithmeticError("a bug in the rating update")

    monkeypatch.setattr(round_module, "rate_window", broken)
    runner.publish(1)
    with pytest.raises(ArithmeticError):
        run_window(runner.round, 1)
    assert runner.round.ledger.window_state(1) != "committed"
    report = run_window(runner.round, 1, salvage=True)
    assert runner.round.ledger.window_state(1) == "committed"
    assert report.selection.gather == ()  # nothing is aggregated on ratings that were never computed
    assert runner.round.model.window == 2
    runner.round.ledger.engine.dispose()
