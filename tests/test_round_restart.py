"""A crash between any two stages, then a restart from storage, commits exactly what an
uninterrupted run commits: no window lost, none counted twice. The uninterrupted run is the
session's reference (conftest.fault_reference), which the fault tests compare with too."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.fault_fixtures import FIRST, REFERENCE_WINDOWS, comparable, gauntlet_env, make_runner, records
from validator.demo.runner import DemoRunner


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


def test_crashes_between_stages_then_restart(fault_reference: DemoRunner, tmp_path: Path) -> None:
    hook = CrashOnce({("commit", FIRST + 1), ("evaluate", FIRST + 2), ("aggregate", FIRST + 3)})
    with gauntlet_env():
        runner = make_runner(tmp_path / "demo", hook=hook)
    published: set[int] = set()
    window = runner.next_window
    while window in REFERENCE_WINDOWS:
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
    got = [comparable(r) for r in records(runner, REFERENCE_WINDOWS)]
    want = [comparable(r) for r in records(fault_reference, REFERENCE_WINDOWS)]
    runner.round.ledger.engine.dispose()
    for a, b in zip(got, want, strict=True):
        assert a == b, a.window
    assert any(r.aggregate_digests for r in want), "a crash after `aggregate` must have moved the model"
    # the model this run holds after its restarts is the reference's: the next window starts alike
    ours, theirs = runner.state.model, fault_reference.state.model
    assert ours.window == theirs.window == REFERENCE_WINDOWS[-1] + 1
    assert ours.base == theirs.base


def test_a_torn_newest_checkpoint_is_rebuilt_from_an_older_one(
    fault_reference: DemoRunner, tmp_path: Path
) -> None:
    """A power loss can leave the newest checkpoint's row naming a short file: every restart failed
    on it (ArchiveCorruptError), though an older checkpoint and the archived aggregates since
    rebuild the same model."""
    from sqlalchemy import text

    with gauntlet_env():
        runner = make_runner(tmp_path / "demo")
    for window in REFERENCE_WINDOWS:
        runner.publish(window)
        runner.validate(window)
    with runner.round.ledger.engine.connect() as db:
        newest, key = db.execute(text('SELECT "window", key FROM checkpoints ORDER BY "window" DESC')).first()
    torn = tmp_path / "demo" / "blobs" / key
    torn.write_bytes(torn.read_bytes()[:1000])
    runner.round.ledger.engine.dispose()
    runner.round, runner.state = runner.connect()  # raised ArchiveCorruptError before
    runner.round.ledger.engine.dispose()
    assert newest == REFERENCE_WINDOWS[-1] + 1
    assert runner.state.model.window == newest and runner.state.model.base == fault_reference.state.model.base
    ours = dict(runner.state.model.model.named_parameters())
    for name, theirs in fault_reference.state.model.model.named_parameters():
        assert torch.equal(ours[name], theirs), name  # the same weights, rebuilt from window 4's checkpoint


def test_a_prune_that_raises_does_not_fail_the_committed_window(tmp_path: Path) -> None:
    """Retention's deletes run after the commit. Raised (an S3 hiccup listing or deleting), they
    failed the round, and the committed window's selection was never published nor its weights
    set; now the fault is logged and the next window prunes again."""
    with gauntlet_env():
        runner = make_runner(tmp_path / "demo")
    calls: list[int] = []

    def failing(window: int, **_: object) -> int:
        calls.append(window)
        raise OSError("S3 503 SlowDown")

    runner.round.ledger.prune = failing  # type: ignore[method-assign]
    window = runner.next_window
    runner.publish(window)
    report = runner.validate(window)
    assert report.window == window and calls == [window]
    assert runner.round.ledger.window_state(window) == "committed"
    assert runner.next_window == window + 1
    assert runner.round.ledger.last_weights_set() == window  # the stages after it ran
    runner.round.ledger.engine.dispose()
