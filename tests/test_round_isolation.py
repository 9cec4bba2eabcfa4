"""One peer cannot stop a window: judging each peer is isolated, a window that keeps failing is
committed salvaged, logs carry tracebacks but never the validator's secret, and empty updates
cannot capture the clip reference. Faults are injected through the round's `Judging` seam."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import math
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from rich.console import Console
from rich.traceback import Traceback

import validator.round.replay as replay
from scoring.clipping import median_norms
from scoring.types import Reason
from tests.poison_fixtures import (
    non_finite_evaluator,
    raising_decoder,
    raising_evaluator,
    random_file,
    register,
    upload,
)
from validator.demo.runner import DemoConfig, DemoRunner
from validator.demo.sim.plugins import parse_peers
from validator.round.loop import Judging, Round, WindowState, run_window
from validator.service import Retry, serve
from validator.state.global_model import GlobalModel
from validator.telemetry.logs import configure_logging, reset_logging
from validator.wiring import load_model, round_config

CANARY = "canary-7f3e9d1c-validator-secret"
Logs = Callable[[], list[dict[str, Any]]]


@pytest.fixture
def json_logs() -> Iterator[Logs]:
    """The service's JSON log configuration, into a buffer; yields a reader of its lines."""
    stream = io.StringIO()
    configure_logging(stream=stream)

    def lines() -> list[dict[str, Any]]:
        return [json.loads(line) for line in stream.getvalue().splitlines()]

    try:
        yield lines
    finally:
        reset_logging()


def _runner(tmp_path: Path, peers: str, monkeypatch: pytest.MonkeyPatch) -> DemoRunner:
    for key in [k for k in os.environ if k.startswith("GAUNTLET_")]:
        monkeypatch.delenv(key)  # restored after the test
    monkeypatch.setenv("GAUNTLET_VALIDATOR_SECRET", CANARY)
    cfg = DemoConfig(parse_peers(peers), workdir=tmp_path / "d", inner_steps=2, corpus_tokens=100_000)
    return DemoRunner(cfg)


def test_a_peer_whose_decoding_or_evaluation_raises_is_internal_error_and_the_window_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, json_logs: Logs
) -> None:
    runner = _runner(tmp_path, "honest:3", monkeypatch)
    a, b, c = runner.network.peers[:3]
    judging = Judging(decode=raising_decoder({a.hotkey}), evaluate=raising_evaluator({b.uid}))
    runner.round = dataclasses.replace(runner.round, judging=judging)
    runner.publish(1)
    report = runner.validate(1)
    by = {p.hotkey: p for p in report.peers}
    assert (by[a.hotkey].status, by[a.hotkey].reason) == ("invalid", Reason.INTERNAL_ERROR)
    assert (by[b.hotkey].status, by[b.hotkey].reason) == ("invalid", Reason.INTERNAL_ERROR)
    assert by[a.hotkey].detail == "decode raised OverflowError"  # the type only: messages stay in the log
    assert by[c.hotkey].status == "ok" and by[c.hotkey].evaluation is not None
    stored = runner.round.ledger.window_detail(1)
    assert stored is not None
    assert {s.hotkey: s.reason for s in stored.submissions}[a.hotkey] == Reason.INTERNAL_ERROR
    assert [e.hotkey for e in stored.evaluations] == [c.hotkey]
    failed = [r for r in json_logs() if r["event"] == "peer_judging_failed"]
    assert {(r["stage"], r["hotkey"]) for r in failed} == {("decode", a.hotkey), ("evaluate", b.hotkey)}
    excs = {r["stage"]: r["exception"][0] for r in failed}
    assert excs["decode"]["exc_type"] == "OverflowError" and "cannot multiply" in excs["decode"]["exc_value"]
    frames = excs["evaluate"]["frames"]  # the traceback, frame by frame, without local variables
    assert frames and all("locals" not in f for f in frames)
    runner.round.ledger.engine.dispose()


@pytest.mark.parametrize("value", [math.nan, math.inf], ids=["nan", "inf"])
def test_a_non_finite_loss_is_no_score_and_the_window_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: float
) -> None:
    """NaN would win its rating match and read as the best proof margin; on SQLite it would fail the
    commit (NOT NULL). The peer is invalid instead, with its own reason, and its evaluation is gone."""
    runner = _runner(tmp_path, "honest:2", monkeypatch)
    a, b = runner.network.peers[:2]
    runner.round = dataclasses.replace(
        runner.round, judging=Judging(evaluate=non_finite_evaluator({a.uid}, value))
    )
    runner.publish(1)
    by = {p.hotkey: p for p in runner.validate(1).peers}
    assert (by[a.hotkey].status, by[a.hotkey].reason, by[a.hotkey].evaluation) == (
        "invalid", Reason.NON_FINITE_LOSS, None,
    )  # fmt: skip
    assert by[b.hotkey].status == "ok" and by[b.hotkey].evaluation is not None
    stored = runner.round.ledger.window_detail(1)
    assert stored is not None and [e.hotkey for e in stored.evaluations] == [b.hotkey]
    assert a.hotkey not in runner.state.ratings.peers or runner.state.ratings.peers[a.hotkey].evaluations == 0
    # replay evaluates it again (it stored no evaluation) and reaches the same verdict; the same
    # faulty evaluator stands in for what made the loss non-finite
    monkeypatch.setattr(replay, "evaluate_peers", non_finite_evaluator({a.uid}, value))
    assert _replay_differences(runner, 1) == {a.hotkey: [], b.hotkey: []}
    runner.round.ledger.engine.dispose()


def _replay_differences(runner: DemoRunner, window: int) -> dict[str, list[str]]:
    """What `gauntlet replay` finds different in the stored window, per peer (tolerance 0)."""
    rows = replay.replay_window(
        window, ledger=runner.round.ledger, model=load_model(runner.settings, runner.dataset),
        dataset=runner.dataset, cfg=round_config(runner.settings),
    )  # fmt: skip
    return {r.hotkey: r.differences(0.0) for r in rows}


@pytest.mark.parametrize("value", [math.nan, -math.inf], ids=["nan", "-inf"])
def test_a_non_finite_probe_step_loss_is_stored_as_not_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: float
) -> None:
    """The probe step's loss is no score (a non-finite one is no retention), so the peer stays ok;
    stored as NaN it read back as NULL on SQLite (replay then saw a difference) and made the window's
    JSON unwritable. It is recorded as not measured, and replay agrees."""
    runner = _runner(tmp_path, "honest:2", monkeypatch)
    a, b = runner.network.peers[:2]
    faulty = non_finite_evaluator({a.uid}, value, probe_only=True)
    runner.round = dataclasses.replace(runner.round, judging=Judging(evaluate=faulty))
    runner.publish(1)
    by = {p.hotkey: p for p in runner.validate(1).peers}
    evaluation = by[a.hotkey].evaluation
    assert by[a.hotkey].status == "ok" and evaluation is not None and evaluation.loss_rand_step is None
    stored = runner.round.ledger.window_detail(1)
    assert stored is not None and {e.hotkey: e.loss_rand_step is None for e in stored.evaluations} == {
        a.hotkey: True, b.hotkey: False,
    }  # fmt: skip
    monkeypatch.setattr(replay, "evaluate_peers", faulty)
    assert _replay_differences(runner, 1) == {a.hotkey: [], b.hotkey: []}
    runner.round.ledger.engine.dispose()


def test_replay_reads_a_stored_nan_as_not_measured() -> None:
    """PostgreSQL kept a NaN probe loss before it was stored as None: no difference for that."""
    row = replay.ReplayRow("h", 0, {"step_loss": math.nan, "score": 0.5}, {"step_loss": None, "score": 0.5})
    assert row.differences(0.0) == []
    assert replay.ReplayRow("h", 0, {"step_loss": 1.0}, {"step_loss": None}).differences(0.0) == ["step_loss"]


def test_a_window_that_always_fails_is_committed_salvaged_and_the_secret_never_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, json_logs: Logs
) -> None:
    runner = _runner(tmp_path, "honest:2", monkeypatch)
    faulty = Judging(evaluate=raising_evaluator(None))  # every evaluation of every peer raises
    metrics = runner.round.metrics

    def connect(old: Round, state: WindowState) -> tuple[Round, WindowState]:
        rnd, runner.state = runner.connect()
        runner.round = dataclasses.replace(rnd, judging=faulty, metrics=metrics)
        return runner.round, runner.state

    first = runner.round
    connect(first, runner.state)
    first.ledger.engine.dispose()
    runner.publish(1)
    with pytest.raises(RuntimeError, match="evaluation failed for all 2 peers") as failure:
        # failing everybody is the validator's fault: the window fails
        run_window(runner.round, runner.state, 1)
    # the worst traceback an operator could print: rich, with every frame's local variables
    console = Console(record=True, width=200, file=io.StringIO())
    console.print(Traceback.from_exception(failure.type, failure.value, failure.tb, show_locals=True))
    rendered = console.export_text()
    assert "run_window" in rendered and CANARY not in rendered
    assert CANARY not in repr(runner.round) and CANARY not in repr(runner.round.cfg)

    stop = threading.Event()
    done = serve(
        runner.round, runner.state, stop=stop, reconnect=connect, max_windows=1,
        retry=Retry(pause_s=0.0, salvage_after=2),
    )  # fmt: skip
    assert done == 1 and runner.round.ledger.window_state(1) == "committed"
    assert metrics.registry.get_sample_value("gauntlet_windows_salvaged_total") == 1
    assert metrics.registry.get_sample_value("gauntlet_window_failures_total") == 2
    stored = runner.round.ledger.window_detail(1)
    assert (
        stored is not None and not stored.evaluations and [s.status for s in stored.submissions] == ["ok"] * 2
    )
    logs = json_logs()
    events = [r["event"] for r in logs]
    assert events.count("round_failed") == 2 and "window_salvaged" in events and "stage_skipped" in events
    failed = next(r for r in logs if r["event"] == "round_failed")
    assert failed["exception"][0]["exc_type"] == "RuntimeError"
    assert CANARY not in json.dumps(logs)
    runner.round.ledger.engine.dispose()


def test_a_majority_of_zero_sybils_cannot_stop_honest_updates_moving_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three empty updates against two honest ones: the window's clip reference, applied through the
    aggregation the round runs, still lets the honest updates move the model."""
    runner = _runner(tmp_path, "honest:2", monkeypatch)
    runner.publish(1)  # the two honest peers train and upload
    sybils = []
    for i, peer in enumerate(register(runner, ["zero-a", "zero-b", "zero-c"])):
        upload(runner, peer, 1, random_file(runner, peer, 1, seed=i, zero=True))  # distinct coordinates
        sybils.append(peer.hotkey)
    start = copy.deepcopy(runner.state.model.model)  # the model the window is scored against
    report = runner.validate(1)
    stored = runner.round.ledger.window_detail(1)
    assert stored is not None
    honest = [p.update for p in report.peers if p.hotkey not in sybils and p.update is not None]
    assert len(honest) == 2
    before = {n: p.detach().clone() for n, p in start.named_parameters()}
    aggregated = GlobalModel(start, runner.state.model.base, 1)
    aggregated.advance([u.params for u in honest], [u.digest for u in honest], stored.clip_reference, 1.0)
    moved = sum(float((p.detach() - before[n]).norm()) for n, p in start.named_parameters())
    assert moved > 1e-3  # with the zeros counted, the clip reference was 0 and nothing moved
    assert min(stored.clip_reference.values()) > 0.0
    assert {p.reason for p in report.peers if p.hotkey in sybils} == {Reason.ZERO_UPDATE}
    runner.round.ledger.engine.dispose()


def test_empty_norms_are_left_out_of_the_clip_reference() -> None:
    norms = [{"a": 0.0, "b": 1.0}, {"a": 0.0, "b": 2.0}, {"a": 0.0, "b": 3.0}, {"a": 1.0, "b": 0.0}]
    assert median_norms([*norms, {"a": 3.0, "b": 0.0}]) == {"a": 2.0, "b": 2.0}
    assert median_norms([{"a": 0.0}, {"a": 1e-13}], floor=1e-12) == {"a": 0.0}  # nobody updated it


def test_json_logs_carry_the_exception_type_message_and_traceback(json_logs: Logs) -> None:
    secret = CANARY  # a local variable of the failing frame: never in the log
    try:
        raise ValueError(f"boom {len(secret)}")
    except ValueError:
        structlog.get_logger("test").exception("round_failed", window=3)
    (line,) = json_logs()
    (exc,) = line["exception"]
    assert (line["event"], line["window"], exc["exc_type"], exc["exc_value"]) == (
        "round_failed",
        3,
        "ValueError",
        "boom 32",
    )
    assert exc["frames"][-1]["name"] == "test_json_logs_carry_the_exception_type_message_and_traceback"
    assert CANARY not in json.dumps(line)
