"""Replay of a window in which the validator's own fault decided a peer."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from scoring.loss_score import evaluate_peers
from scoring.types import Reason
from tests.e2e_fixtures import clear_gauntlet_env
from validator.demo.runner import DemoConfig, DemoRunner
from validator.demo.sim.plugins import parse_peers
from validator.round.loop import Judging
from validator.round.replay import replay_window
from validator.wiring import load_model, round_config


def test_a_peer_whose_evaluation_raised_live_is_not_a_replay_difference(tmp_path: Path) -> None:
    """A transient fault (a worker's memory, an unreadable archive) commits its peer as
    internal_error in a window that is not salvaged; replay evaluated that peer normally and
    reported the window as differing, every time."""
    clear_gauntlet_env()
    runner = DemoRunner(
        DemoConfig(parse_peers("honest:3"), workdir=tmp_path, inner_steps=2, corpus_tokens=100_000)
    )
    victim = runner.network.peers[0].uid

    def flaky(model: torch.nn.Module, jobs: list, heldout: object, **kw: object) -> object:  # type: ignore[type-arg]
        if any(j.uid == victim for j in jobs):
            raise MemoryError("transient")
        return evaluate_peers(model, jobs, heldout, **kw)  # type: ignore[arg-type]

    runner.round = dataclasses.replace(runner.round, judging=Judging(evaluate=flaky))
    runner.publish(1)
    report = runner.validate(1)
    assert {p.uid: p.reason for p in report.peers}[victim] == Reason.INTERNAL_ERROR
    rows = replay_window(
        1, ledger=runner.round.ledger, model=load_model(runner.settings, runner.dataset),
        dataset=runner.dataset, cfg=round_config(runner.settings),
    )  # fmt: skip
    faulted = [r.uid for r in rows if r.faulted]
    assert faulted == [victim] and not any(r.differences(0.0) for r in rows)
    assert rows[0].recomputed  # the others are re-derived and compared


def test_a_peer_whose_decode_raised_live_stays_rejected_in_replay(tmp_path: Path) -> None:
    """Judged again from its bytes, a peer the live round's decode fault had rejected was valid in
    replay: it entered the copy check, the clip reference and the links, and the other peers'
    rows differed (inflation, step loss, retention, score, proof)."""
    clear_gauntlet_env()
    runner = DemoRunner(
        DemoConfig(parse_peers("honest:4"), workdir=tmp_path, inner_steps=2, corpus_tokens=100_000)
    )
    victim, decode = runner.network.peers[0].uid, runner.round.judging.decode

    def flaky(data: object, spec: object, expect: Any, codec: object) -> Any:
        if expect.uid == victim:
            raise MemoryError("transient")
        return decode(data, spec, expect, codec)  # type: ignore[arg-type]

    runner.round = dataclasses.replace(
        runner.round, judging=dataclasses.replace(runner.round.judging, decode=flaky)
    )
    runner.publish(1)
    assert {p.uid: p.reason for p in runner.validate(1).peers}[victim] == Reason.INTERNAL_ERROR
    rows = replay_window(
        1, ledger=runner.round.ledger, model=load_model(runner.settings, runner.dataset),
        dataset=runner.dataset, cfg=round_config(runner.settings, runner.dataset),
    )  # fmt: skip
    assert [r.uid for r in rows if r.faulted] == [victim]
    assert not [(r.uid, r.differences(0.0)) for r in rows if r.differences(0.0)]


def test_a_field_recorded_as_none_for_every_peer_is_still_compared() -> None:
    """Masked whenever every stored peer held None, a recorded field hid a real difference (no
    peer had played a match yet, and replay's `last_matched` was never compared); only a field
    the window was stored without is left out."""
    from tests.storage_fixtures import make_window
    from validator.round.replay import _stored_rows, unrecorded

    record = make_window(3)
    since = dataclasses.replace(
        record,
        ratings=[dataclasses.replace(r, state={**r.state, "last_matched": None}) for r in record.ratings],
    )
    before = dataclasses.replace(
        record,
        ratings=[
            dataclasses.replace(r, state={k: v for k, v in r.state.items() if k != "last_matched"})
            for r in record.ratings
        ],
    )
    assert "last_matched" not in unrecorded(since, _stored_rows(since))
    assert "last_matched" in unrecorded(before, _stored_rows(before))
