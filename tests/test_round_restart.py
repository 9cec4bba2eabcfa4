"""A crash between any two stages, then a restart from storage, commits exactly what an
uninterrupted run commits: no window lost, none counted twice."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from storage.records import WindowRecord
from tests.e2e_fixtures import FIRST, ScenarioRun, clear_gauntlet_env, make_runner

WINDOWS = 4


class InjectedCrash(RuntimeError):
    pass


class CrashOnce:
    """Raises the first time the round reaches each (stage, window) given."""

    def __init__(self, points: set[tuple[str, int]]) -> None:
        self.pending = set(points)
        self.fired: list[tuple[str, int]] = []

    def __call__(self, stage: str, window: int) -> None:
        if (stage, window) in self.pending:
            self.pending.discard((stage, window))
            self.fired.append((stage, window))
            raise InjectedCrash(f"crash after {stage} in window {window}")


def comparable(record: WindowRecord) -> WindowRecord:
    """What must be identical across runs: everything but wall-clock facts and signatures (sr25519
    signatures are randomized, so file bytes, etags and content digests differ). The config digest
    leaves out paths, so runs in different folders must still agree on it."""
    return replace(
        record,
        timings={},
        submissions=[
            replace(s, content_digest=None, etag=None, fetched_time=None) for s in record.submissions
        ],
        evaluations=[replace(e, timings={}) for e in record.evaluations],
    )


@pytest.fixture
def reference(full_scenario: ScenarioRun) -> ScenarioRun:
    """The uninterrupted run (its first WINDOWS windows are compared)."""
    return full_scenario


def test_crashes_between_stages_then_restart(reference: ScenarioRun, tmp_path: Path) -> None:
    clear_gauntlet_env()
    hook = CrashOnce({("commit", FIRST + 1), ("evaluate", FIRST + 2), ("aggregate", FIRST + 3)})
    runner = make_runner(tmp_path / "demo", hook=hook)
    published: set[int] = set()
    window = runner.next_window
    while window < FIRST + WINDOWS:
        if window not in published:
            runner.publish(window)
            published.add(window)
        try:
            runner.validate(window)
        except InjectedCrash:
            # a new process: model and ratings rebuilt from storage
            runner.round, runner.state = runner.connect()
        window = runner.next_window
    assert len(hook.fired) == 3 and not hook.pending
    windows = range(FIRST, FIRST + WINDOWS)
    got = [comparable(r) for r in ScenarioRun(runner).records(windows)]
    want = [comparable(r) for r in reference.records(windows)]
    for a, b in zip(got, want, strict=True):
        assert a == b, a.window
    ours = ScenarioRun(runner).records(range(FIRST + WINDOWS - 1, FIRST + WINDOWS))[0]
    theirs = reference.records(range(FIRST + WINDOWS, FIRST + WINDOWS + 1))[0]
    # the next window of the reference started from the model this run ended with
    from scoring.fingerprint import next_base

    assert next_base(ours.base_fingerprint, ours.aggregate_digests) == theirs.base_fingerprint
