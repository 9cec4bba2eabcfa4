"""The evaluation budget follows the time left in a live window, never in the demo.

Under heavy load (two benchmarks beside the suite) `test_ownership`'s newcomer test failed once: the
budget is the time left over the seconds an evaluation takes, and a starved window had no room for
the readings that leave the frontrunner out. The demo's chain is simulated and waits for the
validator, so its runs (and every benchmark built on them) take only `eval.budget`."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

import validator.round.loop as loop
from tests.e2e_fixtures import clear_gauntlet_env
from validator.demo.runner import DemoConfig, DemoRunner
from validator.demo.sim.plugins import parse_peers


def _starved(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read of the round's clock is an hour after the last: no time is ever left."""
    ticks = itertools.count(step=3600.0)
    monkeypatch.setattr(loop.time, "perf_counter", lambda: float(next(ticks)))


def _runner(tmp_path: Path) -> DemoRunner:
    clear_gauntlet_env()
    cfg = DemoConfig(parse_peers("honest:3"), windows=1, workdir=tmp_path, corpus_tokens=600_000)
    return DemoRunner(cfg)


def _evaluated(runner: DemoRunner) -> int:
    runner.publish(1)
    report = runner.validate(1)
    return sum(p.evaluation is not None for p in report.peers)


def test_a_starved_machine_changes_nothing_the_demo_measures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = _runner(tmp_path)
    assert runner.round.paced is False
    _starved(monkeypatch)
    assert _evaluated(runner) == 3


def test_a_live_round_evaluates_what_the_time_left_affords(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = _runner(tmp_path)
    runner.round = replace(runner.round, paced=True)  # as `gauntlet run` builds it
    _starved(monkeypatch)
    assert _evaluated(runner) == 1  # the budget's floor: one evaluation
