"""The demo's full-adversary scenario, run once per test session and shared by the e2e tests."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from storage.records import WindowRecord
from validator.demo.runner import DemoConfig, DemoRunner
from validator.demo.sim.plugins import parse_peers
from validator.round.loop import WindowReport

SCENARIO = "honest:4,lazy:1,copycat:1,replay:1,noise:1,scaled:1,stale:1,late:1,malformed:1,free_rider:1"
WINDOWS = 6
FIRST = 1


def clear_gauntlet_env() -> None:
    for key in [k for k in os.environ if k.startswith("GAUNTLET_")]:
        del os.environ[key]


def make_runner(
    workdir: Path, hook: Callable[[str, int], None] | None = None, inner_steps: int = 20
) -> DemoRunner:
    cfg = DemoConfig(
        parse_peers(SCENARIO),
        windows=WINDOWS,
        workdir=workdir,
        inner_steps=inner_steps,
        corpus_tokens=600_000,
    )
    return DemoRunner(cfg, hook=hook)


@dataclass
class ScenarioRun:
    runner: DemoRunner
    reports: list[WindowReport] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)

    def behaviour(self) -> dict[str, str]:
        return self.runner.network.behaviour_of()

    def records(self, windows: range) -> list[WindowRecord]:
        out = []
        for w in windows:
            record = self.runner.round.ledger.window_detail(w)
            assert record is not None, w
            out.append(record)
        return out


def run_scenario(workdir: Path, windows: int = WINDOWS, inner_steps: int = 20) -> ScenarioRun:
    run = ScenarioRun(make_runner(workdir, inner_steps=inner_steps))
    run.losses.append(run.runner.heldout_loss())
    for w in range(FIRST, FIRST + windows):
        run.runner.publish(w)
        run.reports.append(run.runner.validate(w))
        run.losses.append(run.runner.heldout_loss())
    return run
