"""A window whose rating stage keeps raising is still committed in salvage, never retried forever."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import validator.round.pipeline as pipeline
from validator.demo.runner import DemoConfig, DemoRunner
from validator.demo.sim.plugins import parse_peers
from validator.round.replay import replay_window
from validator.wiring import load_model, round_config


def test_a_rating_stage_that_raises_is_skipped_in_a_salvaged_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith("GAUNTLET_")]:
        monkeypatch.delenv(key)  # restored after the test, unlike a bare del
    cfg = DemoConfig(parse_peers("honest:2"), workdir=tmp_path / "d", inner_steps=2, corpus_tokens=100_000)
    runner = DemoRunner(cfg)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ArithmeticError("a bug in the rating update")

    monkeypatch.setattr(pipeline, "rate_window", broken)
    runner.publish(1)
    with pytest.raises(ArithmeticError):
        runner.validate(1)
    assert runner.round.ledger.window_state(1) != "committed"
    report = runner.validate(1, salvage=True)
    assert runner.round.ledger.window_state(1) == "committed"
    assert report.selection.gather == ()  # nothing is aggregated on ratings that were never computed
    assert runner.state.model.window == 2
    stored = runner.round.ledger.window_detail(1)
    assert stored is not None and stored.salvaged  # the record says a stage was not computed
    with pytest.raises(LookupError, match="salvage"):  # so replay refuses instead of "differing"
        replay_window(
            1, ledger=runner.round.ledger, model=load_model(runner.settings, runner.dataset),
            dataset=runner.dataset, cfg=round_config(runner.settings),
        )  # fmt: skip
    monkeypatch.undo()  # the real rating update again: a salvaged run where nothing raises is whole
    runner.publish(2)
    runner.validate(2, salvage=True)
    again = runner.round.ledger.window_detail(2)
    assert again is not None and not again.salvaged
    runner.round.ledger.engine.dispose()
