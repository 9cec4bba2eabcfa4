"""The closest pairs no finding names, read on each other's pages (scoring/uniqueness.py `_closest`,
scoring/copy_findings.py `held_findings`, validator/round/cross.py).

A proven frontrunner that sent its victim's update (computed from public inputs) with dense noise at
the update's RMS overlapped its victim as honest pairs do and was never flagged, yet the pair was the
window's closest in residual similarity (`frontrun_noisy`). Its update read on the victim's pages
as the victim's own did. The page tests below are the ones a `bench_fidelity` run measured
(`honest_only` and `frontrun_noisy`, seed 0, this module's commit).
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from scoring.copy_config import CopyTier
from scoring.copy_findings import CopyFinding, Watched, held_findings, unclear
from scoring.types import Reason, SparseParam
from scoring.uniqueness import PeerPayload, UniquenessConfig, examine_copies
from tests.e2e_fixtures import clear_gauntlet_env
from tests.test_cross_readings import _peer
from tests.uniqueness_fixtures import random_update
from validator.demo.runner import DemoConfig, DemoRunner
from validator.demo.sim.plugins import parse_peers
from validator.round import checking
from validator.round.cross import ReadingPlan, wanted_readings
from validator.round.replay import ReplayRow, replay_window
from validator.wiring import load_model, round_config

EVERY_PAIR = UniquenessConfig(resemblance_floor=-1.0)  # every compared pair reported


def _window(rng: np.random.Generator, share: float, copy: float = 0.0) -> list[PeerPayload]:
    """Five honest updates around one consensus; `n` holds `share` of `h0`'s own part, `k` is `h1`
    with `copy` of its own noise (a close copy the tiers flag)."""
    layout = random_update(rng)
    consensus = {n: rng.standard_normal(p.values.numel()) for n, p in layout.items()}
    own = {h: {n: 1.2 * rng.standard_normal(p.values.numel()) for n, p in layout.items()} for h in "abcde"}
    values = {f"h{i}": own[h] for i, h in enumerate("abcd")}
    values["n"] = {n: share * own["a"][n] + (1 - share) * own["e"][n] for n in layout}
    if copy:
        values["k"] = {n: own["b"][n] + copy * rng.standard_normal(v.size) for n, v in own["b"].items()}
    peers = []
    for i, (name, parts) in enumerate(sorted(values.items())):
        update = {
            n: SparseParam(p.shape, p.indices, torch.from_numpy((consensus[n] + parts[n]).astype(np.float32)))
            for n, p in layout.items()
        }
        peers.append(PeerPayload(name, f"d{i}", float(i), update, math.inf, proven=True))
    return peers


def test_the_closest_pairs_no_finding_names_are_watched_most_similar_first() -> None:
    rng = np.random.default_rng(7)
    check = examine_copies(_window(rng, share=0.2), EVERY_PAIR, seed=3)
    assert not check.findings  # under the tiers: nothing flags the pair
    closest = sorted(check.resemblances.items(), key=lambda kv: -kv[1])[:2]
    assert [((w.a, w.b), w.similarity) for w in check.watched] == closest
    assert (check.watched[0].a, check.watched[0].b) == ("h0", "n")
    # a pair the tiers flag is read as a finding already: never watched
    flagged = examine_copies(_window(np.random.default_rng(7), share=0.2, copy=0.1), EVERY_PAIR, seed=3)
    assert {frozenset((f.offender, f.other)) for f in flagged.findings} == {frozenset(("h1", "k"))}
    assert all({w.a, w.b} != {"h1", "k"} for w in flagged.watched) and len(flagged.watched) == 2
    assert not examine_copies(_window(rng, share=0.2), UniquenessConfig(watch=0), seed=3).watched


# (page tests, readings) of the watched pairs of windows a bench_fidelity run measured, seed 0
HONEST = [  # honest_only, windows 1-8: the closest pair of each
    ({"D": 3.75, "F": 3.25}, {("D", "F"): 1.2, ("F", "D"): 2.08}),
    ({"C": 2.35, "D": 2.25}, {("C", "D"): 1.6, ("D", "C"): -0.03}),
    ({"D": 2.11, "F": 2.23}, {("D", "F"): 1.26, ("F", "D"): 1.6}),
    ({"C": 0.38, "F": 1.99}, {("C", "F"): -1.61, ("F", "C"): 0.7}),
    ({"E": 0.55, "F": 2.04}, {("E", "F"): -0.48, ("F", "E"): 0.89}),
    ({"E": -0.21, "F": 0.83}, {("E", "F"): -2.26, ("F", "E"): -1.26}),
    ({"C": 2.42, "E": 1.5}, {("C", "E"): 0.32, ("E", "C"): -1.48}),
    ({"C": 2.89, "E": 3.29}, {("C", "E"): -0.06, ("E", "C"): 0.01}),
    # weak_half under seed 1, window 7: the two full peers; one side alone read "held"
    ({"C": 0.95, "D": 3.37}, {("C", "D"): -1.49, ("D", "C"): 2.9}),
]
FRONTRUN = [  # frontrun_noisy, windows 4-8: the frontrunner F and its victim V, the closest pair each time
    ({"V": 0.55, "F": 0.36}, {("V", "F"): 0.27, ("F", "V"): 0.2}),
    ({"V": 1.94, "F": 2.41}, {("V", "F"): 2.23, ("F", "V"): 0.14}),
    ({"V": 1.31, "F": -0.46}, {("V", "F"): 1.28, ("F", "V"): -0.68}),
    ({"V": 4.27, "F": -0.83}, {("V", "F"): 2.51, ("F", "V"): -2.14}),
    ({"V": 3.73, "F": 1.25}, {("V", "F"): 2.61, ("F", "V"): 2.03}),
]


def _watched(readings: dict[tuple[str, str], float]) -> list[Watched]:
    a, b = sorted({k for pair in readings for k in pair})
    return [Watched(a, b, -0.06, 0.18)]


@pytest.mark.parametrize("page_t, readings", HONEST)
def test_no_honest_pair_measured_holds_the_others_training(
    page_t: dict[str, float], readings: dict[tuple[str, str], float]
) -> None:
    assert held_findings(_watched(readings), [], page_t, readings) == []


def test_the_noisy_frontrunner_is_held_where_the_own_tests_and_readings_agree() -> None:
    """Caught in one window of five: in the others its victim's pages read its update far under the
    victim's own (window 7) or its own raised page test leaves its claim within the margin (5, 8).
    Closing the rest needs a reference for the part every update gains on one page set (open)."""
    held = [held_findings(_watched(r), [], t, r) for t, r in FRONTRUN]
    assert [len(h) for h in held] == [0, 0, 1, 0, 0]
    [found] = held[2]
    assert not found.clear and {found.offender, found.other} == {"F", "V"}
    assert found.tier is CopyTier.NONE and found.similarity == -0.06  # recorded as the pair measured


def test_a_held_pair_the_owners_rule_would_not_decide_is_left_alone() -> None:
    """A watched finding that `owners` would not decide would make the pair twins of which the
    better rated is kept, the author possibly not: the holder's crowd of partners raises the bar."""
    page_t, readings = FRONTRUN[2]
    others = [unclear(CopyFinding("F", q, 0.5, CopyTier.HALVE, Reason.COPY)) for q in ("q1", "q2", "q3")]
    crowd = {**page_t, "q1": -1.0, "q2": -1.0, "q3": -1.0}  # F reads over these
    assert held_findings(_watched(readings), others, crowd, readings) == []
    assert held_findings(_watched(readings), [], page_t, {("V", "F"): 1.28}) == []  # one direction only


def test_watched_pairs_are_read_after_the_findings_while_room_is_left() -> None:
    evaluated = [_peer(h, u, f"d{u}") for u, h in enumerate(["a", "b", "c", "d", "e", "f"])]
    finding = unclear(CopyFinding("b", "a", 0.5, CopyTier.HALVE, Reason.COPY))
    watched = [Watched("c", "d", -0.05, 0.2), Watched("a", "e", -0.07, 0.2)]
    page_t = {p.hotkey: 1.0 for p in evaluated}
    plan = ReadingPlan(1.0)  # six readings: three pairs
    got = wanted_readings(evaluated, [finding], page_t, plan, watched)
    assert got == [("b", "a"), ("a", "b"), ("c", "d"), ("d", "c"), ("a", "e"), ("e", "a")]
    assert wanted_readings(evaluated, [finding], page_t, ReadingPlan(0.5), watched) == got[:2]
    replayed = ReadingPlan(1.0, recorded={("c", "d"), ("d", "c")})
    assert wanted_readings(evaluated, [finding], page_t, replayed, watched) == [("c", "d"), ("d", "c")]
    same = [*evaluated[:5], replace(evaluated[5], update=evaluated[2].update)]  # f sent c's very bytes
    assert ("c", "f") not in wanted_readings(same, [], page_t, plan, [Watched("c", "f", 0.1, 0.9)])


def test_a_held_pair_is_stored_with_its_readings_and_replay_derives_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replay reads exactly the readings stored with the window's pairs: a watched pair's are stored
    where they found something (here every read watched pair is made to), and only then."""
    clear_gauntlet_env()
    runner = DemoRunner(
        DemoConfig(parse_peers("honest:4"), windows=1, workdir=tmp_path, corpus_tokens=600_000)
    )
    runner.publish(1)

    def held(
        watched: list[Watched], findings: object, page_t: object, readings: dict[tuple[str, str], float]
    ) -> list[CopyFinding]:
        return [
            unclear(CopyFinding(w.b, w.a, w.overlap, CopyTier.NONE, Reason.COPY, w.similarity))
            for w in watched
            if (w.a, w.b) in readings
        ]

    monkeypatch.setattr(checking, "held_findings", held)
    runner.validate(1)
    with sqlite3.connect(tmp_path / "gauntlet.db") as db:
        rows = db.execute(
            "SELECT hotkey_a, hotkey_b, authorship_a, authorship_b, clear FROM copy_pairs"
        ).fetchall()
    [(a, b, read_a, read_b, clear)] = rows  # 4 evaluated peers: one pair's readings
    assert read_a is not None and read_b is not None and not clear
    replayed = replay_window(
        1, ledger=runner.round.ledger, model=load_model(runner.settings, runner.dataset),
        dataset=runner.dataset, cfg=round_config(runner.settings, runner.dataset),
    )  # fmt: skip
    by_key: dict[str, ReplayRow] = {r.hotkey: r for r in replayed}
    assert not {h: r.differences(0.0) for h, r in by_key.items() if r.differences(0.0)}
    assert by_key[a].recomputed["readings"] == {b: read_a}
    assert by_key[b].recomputed["readings"] == {a: read_b}
