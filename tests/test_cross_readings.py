"""Which flagged pairs' updates are read on each other's pages (validator/round/cross.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from scoring.copy_config import CopyTier
from scoring.copy_findings import CopyFinding
from scoring.sampling import History, sample_for_evaluation
from tests.e2e_fixtures import clear_gauntlet_env
from tests.test_selection import sized
from validator.demo.runner import DemoConfig, DemoRunner
from validator.demo.sim.plugins import parse_peers
from validator.round import cross
from validator.round.cross import ReadingPlan, kept_for_readings, readings_limit, to_read, wanted_readings
from validator.round.evaluation import EvalSetup, HeldOut
from validator.round.outcomes import PeerWindow
from validator.round.replay import ReplayRow, replay_window
from validator.wiring import load_model, round_config


def _peer(hotkey: str, uid: int, digest: str) -> PeerWindow:
    p = sized(hotkey, uid, 1.0)
    assert p.update is not None
    return replace(p, update=replace(p.update, digest=digest, decoded=None))


def _finding(offender: str, other: str, clear: bool = False) -> CopyFinding:
    return CopyFinding(offender, other, 0.9, CopyTier.BAN, "copy", clear=clear)


def test_pairs_are_read_whole_the_ones_the_own_tests_would_act_on_first() -> None:
    """A review: a crowd of cheap identities flagged among themselves at low overlap came first and
    pushed a copier's pair out of the window's readings (which can only veto what the own tests
    would do); an odd limit read one direction of a pair. One payload needs no reading at all."""
    evaluated = {h: _peer(h, u, f"d{u}") for u, h in enumerate(["victim", "copier", "s1", "s2", "twin"])}
    evaluated["twin"] = _peer("twin", 9, "d0")  # the victim's very bytes
    findings = [
        _finding("s2", "s1"),
        _finding("copier", "victim"),
        _finding("twin", "victim"),
        _finding("x", "s1"),
    ]
    page_t = {"victim": 2.3, "copier": 6.0, "s1": 0.1, "s2": 0.3, "twin": 0.2}
    assert to_read(findings, evaluated, page_t) == [("copier", "victim"), ("s2", "s1")]
    clear = [*findings, _finding("s1", "victim", clear=True)]
    assert to_read(clear, evaluated, page_t)[0] == ("s1", "victim")  # a clear finding can convict
    assert readings_limit(0.5, 7) // 2 == 1  # 3 readings: one whole pair


def test_replay_reads_what_the_window_read_and_compares_every_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The readings were recorded but replay neither compared them nor knew which the live round
    had: a reading a worker lost live (its result never came back) was read in replay, where it
    could change the decisions the live round had left to the own tests. Replay now reads exactly
    the stored readings and compares each with its re-reading (`readings`, by the reader)."""
    clear_gauntlet_env()
    runner = DemoRunner(
        DemoConfig(parse_peers("honest:3,copycat:1"), windows=1, workdir=tmp_path, corpus_tokens=600_000)
    )
    names = runner.network.behaviour_of()
    copycat = next(h for h, b in names.items() if b == "copycat")
    runner.publish(1)
    db_path = tmp_path / "gauntlet.db"
    uids = {p.hotkey: p.uid for p in runner.network.peers}
    real = cross.evaluate_chosen
    lost: list[str] = []  # the reader whose reading the worker loses: the copycat's partner

    def lossy(setup: EvalSetup, posed: Sequence[PeerWindow], held: HeldOut, reference: Any) -> Any:
        results, failed, stats = real(setup, posed, held, reference)
        victim = next(p.hotkey for p in posed if p.hotkey != copycat)
        lost.append(victim)
        return [r for r in results if r.uid != uids[victim]], failed, stats

    monkeypatch.setattr(cross, "evaluate_chosen", lossy)
    runner.validate(1)
    monkeypatch.undo()
    [victim] = set(lost)
    pair = "SELECT hotkey_a, authorship_a, authorship_b FROM copy_pairs WHERE ? IN (hotkey_a, hotkey_b)"
    with sqlite3.connect(db_path) as db:
        [(a, read_a, read_b)] = db.execute(pair, (copycat,)).fetchall()
    read = {a: read_a, (victim if a == copycat else copycat): read_b}
    assert read[victim] is None and read[copycat] is not None  # lost live, stored as not read

    def replay() -> dict[str, ReplayRow]:
        rows = replay_window(
            1, ledger=runner.round.ledger, model=load_model(runner.settings, runner.dataset),
            dataset=runner.dataset, cfg=round_config(runner.settings, runner.dataset),
        )  # fmt: skip
        return {r.hotkey: r for r in rows}

    rows = replay()
    assert not {h: r.differences(0.0) for h, r in rows.items() if r.differences(0.0)}
    assert rows[copycat].recomputed["readings"] == {victim: read[copycat]}  # bit-exact, compared
    assert rows[victim].recomputed["readings"] == {}  # the lost one was not read again
    # the pair is tied (two unproven senders): its claims and their counts are re-derived, compared
    assert rows[copycat].recomputed["claims"].keys() == {victim} and rows[victim].recomputed["claims"]
    assert rows[copycat].recomputed["claim_windows"] == {victim: 1}
    assert rows[victim].stored["claim_windows"] == {copycat: 1} == rows[victim].recomputed["claim_windows"]
    column = "authorship_a" if a == copycat else "authorship_b"
    with sqlite3.connect(db_path) as db:  # a stored reading that no longer matches its inputs
        db.execute(
            f"UPDATE copy_pairs SET {column} = {column} + 0.5 WHERE ? IN (hotkey_a, hotkey_b)", (copycat,)
        )
    assert replay()[copycat].differences(0.0) == ["readings"]


def test_a_crowd_flagged_among_itself_takes_no_budget_from_proven_work() -> None:
    """The live round kept two evaluations of its budget for each flagged pair's readings, up to
    half of it: four cheap identities sending two pairs of near-copies (unproven, never aggregated)
    took 4 of a budget of 8, and the evaluation's proven tier then had room for three of the four
    honest peers. Only a pair with a proven sender claims budget now; the others are read from
    what the evaluation leaves, after the pairs that can matter."""
    honest = ["h0", "h1", "h2", "h3"]
    junk = [_finding("j1", "j0"), _finding("j3", "j2")]
    assert kept_for_readings(8, 0.5, junk, honest) == 0
    history = History(proven=frozenset(honest), seen={j: 5 for j in ("j0", "j1", "j2", "j3")})
    everyone = [*honest, "j0", "j1", "j2", "j3"]
    assert set(honest) <= set(sample_for_evaluation(everyone, 8 - 0, history, 1, 0))
    assert len(set(honest) & set(sample_for_evaluation(everyone, 8 - 4, history, 1, 0))) == 3  # before
    copier = _finding("copier", "h0", clear=True)
    assert kept_for_readings(8, 0.5, [*junk, copier], honest) == 2
    assert kept_for_readings(8, 0.5, [*junk, copier, _finding("h1", "h2"), _finding("x", "h3")], honest) == 4
    # read in that order too: a proven sender's pair before a wider spread of two noise tests
    evaluated = {h: _peer(h, u, f"d{u}") for u, h in enumerate(["h1", "h2", "j0", "j1"])}
    page_t = {"h1": 2.0, "h2": 1.5, "j0": -1.4, "j1": 1.6}
    findings = [_finding("j1", "j0"), _finding("h2", "h1")]
    assert to_read(findings, evaluated, page_t) == [("j1", "j0"), ("h2", "h1")]
    assert to_read(findings, evaluated, page_t, honest) == [("h2", "h1"), ("j1", "j0")]
    # and no more than the time left affords: one pair at a cap of 2
    plan = ReadingPlan(0.5, frozenset(honest), cap=2)
    assert wanted_readings(list(evaluated.values()), findings, page_t, plan) == [("h2", "h1"), ("h1", "h2")]
    assert len(wanted_readings(list(evaluated.values()), findings, page_t, ReadingPlan(1.0))) == 4


def test_one_cheap_copier_cannot_take_the_reading_a_proven_peer_needs() -> None:
    """A red-team run: a six-peer window reads one pair, and clear findings came first: one cheap
    unproven copier of any proven peer took it, and a proven copier whose own test it had raised
    (6.0 against 2.3) disowned its victim unread. Pairs where the own tests would leave a proven
    sender out are read first."""
    names = ["h1", "h2", "h3", "bc", "decoy", "h4"]
    evaluated = {h: _peer(h, u, f"d{u}") for u, h in enumerate(names)}
    page_t = {"h1": 2.3, "h2": 2.1, "h3": 1.9, "bc": 6.0, "decoy": -0.4, "h4": 2.0}
    findings = [_finding("decoy", "h2", clear=True), _finding("h1", "bc")]
    proven = {"h1", "h2", "h3", "bc", "h4"}
    assert to_read(findings, evaluated, page_t) == [("decoy", "h2"), ("h1", "bc")]  # before: no proof read
    assert to_read(findings, evaluated, page_t, proven)[0] == ("h1", "bc")
    plan = ReadingPlan(0.5, frozenset(proven))
    assert wanted_readings(list(evaluated.values()), findings, page_t, plan) == [("h1", "bc"), ("bc", "h1")]
    # a pair of two proven senders comes before a clear finding even without a wide spread: the
    # own tests decide which of the two is kept
    close = [_finding("decoy", "h2", clear=True), _finding("h3", "h4")]
    assert to_read(close, evaluated, page_t, proven)[0] == ("h3", "h4")
