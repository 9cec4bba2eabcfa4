"""The persistence check (scoring/persistence.py, validator/round/drift.py): a peer that keeps a
direction of its own across windows is left out of the aggregate; honest peers are not."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np
import pytest
import torch

from scoring.persistence import (
    F16,
    PersistenceConfig,
    decode,
    drifting,
    encode,
    long_lag_similarity,
    next_evidence,
    over_alarm,
    residuals,
    sketch_seed,
    update_sketch,
)
from scoring.ranking import PeerRating, RatingState, Status
from scoring.selection import Candidate, select_aggregation
from scoring.types import SparseParam
from validator.round.drift import alarmed_peers, measure_drift, with_drift
from validator.round.outcomes import PeerTarget, PeerWindow

N = 20_000  # coordinates, every one kept: the residual is what the peers do beyond the consensus
# the synthetic honest residuals are independent (mean 0), so the reference sits above their
# per-window spread (1/√N ≈ 0.007 per pair); the demo's measured defaults are checked by bench_fidelity
CFG = PersistenceConfig(bits=14, gate=True, reference=0.01, step_cap=0.02, alarm=0.04, cap=0.08)


class Peer:
    """What the drift stage reads of a peer: a valid decoded update."""

    def __init__(self, hotkey: str, values: np.ndarray) -> None:
        param = SparseParam((N,), torch.arange(N), torch.from_numpy(values.astype(np.float32)))
        update = type("U", (), {"params": {"w": param}})()
        self.window = PeerWindow(PeerTarget(0, hotkey, None), Status.OK, update=update)  # type: ignore[arg-type]


def simulate(windows: int, weight: float, seed: int = 0) -> list[RatingState]:
    """Five honest peers (the consensus plus noise of their own) and one that adds a fixed direction
    at `weight` of its noise's norm, window after window; each window's ratings afterwards."""
    rng = np.random.default_rng(seed)
    hidden = rng.standard_normal(N)
    hidden /= np.linalg.norm(hidden)
    stored: dict[str, list[F16]] = {}
    state = RatingState({h: PeerRating(h, 0, 25.0, 8.3) for h in [*"abcde", "poison"]}, None)
    out = []
    for window in range(windows):
        consensus = rng.standard_normal(N) * 2
        peers = []
        for h in state.peers:
            noise = rng.standard_normal(N)
            extra = weight * np.linalg.norm(noise) * hidden if h == "poison" else 0.0
            peers.append(Peer(h, consensus + noise + extra).window)

        def earlier(hotkeys: Collection[str], w: int = window) -> Mapping[str, Sequence[F16]]:
            # windows lag … horizon back: residual i was stored in window i
            return {h: stored.get(h, [])[max(w - CFG.horizon, 0) : max(w - CFG.lag + 1, 0)] for h in hotkeys}

        drift = measure_drift(peers, CFG, 11, earlier, alarmed_peers(state, CFG))
        for h, data in drift.residuals.items():
            r = decode(data, CFG.bits)
            assert r is not None
            stored.setdefault(h, []).append(r)
        state = with_drift(state, drift, CFG)
        out.append(state)
    return out


def test_a_peer_keeping_a_direction_of_its_own_drifts_and_honest_peers_never_do() -> None:
    states = simulate(14, weight=0.3)
    drifted = [w for w, s in enumerate(states) if drifting(s.peers["poison"].drift, CFG)]
    # its first comparable window is `lag`; two windows of evidence reach the alarm
    assert drifted and drifted[0] <= CFG.lag + 2
    for s in states:
        assert not any(drifting(s.peers[h].drift, CFG) for h in "abcde")
        assert all((s.peers[h].drift_similarity or 0.0) < 0.03 for h in "abcde")
    assert (states[-1].peers["poison"].drift_similarity or 0.0) > 0.05  # ≈ w² / (1 + w²) = 0.083


def test_without_a_hidden_direction_nobody_drifts_over_many_windows() -> None:
    for s in simulate(30, weight=0.0, seed=3):
        assert not any(drifting(p.drift, CFG) for p in s.peers.values())


def test_the_sketch_is_reproducible_and_keyed_by_the_secret() -> None:
    rng = np.random.default_rng(0)
    update = {
        "w": SparseParam((N,), torch.arange(N), torch.from_numpy(rng.standard_normal(N).astype(np.float32)))
    }
    a, b = update_sketch(update, 12, 5), update_sketch(update, 12, 5)
    assert a.tobytes() == b.tobytes()
    assert update_sketch(update, 12, 6).tobytes() != a.tobytes()
    assert sketch_seed(b"one") != sketch_seed(b"two") and sketch_seed(b"one") == sketch_seed(b"one")


def test_residuals_need_a_consensus_and_round_trip_through_storage_bytes() -> None:
    rng = np.random.default_rng(1)

    def unit() -> F16:
        v = rng.standard_normal(256)
        return (v / np.linalg.norm(v)).astype(np.float16)

    assert residuals({"a": unit(), "b": unit()}) == {}
    assert residuals({"a": unit(), "b": unit(), "c": unit()}, outside={"c"}) == {}  # two in the consensus
    units = {k: unit() for k in "abc"}
    before = {k: v.astype(np.float64) for k, v in units.items()}
    out = residuals(units)
    assert sorted(out) == ["a", "b", "c"]
    for k, r in out.items():  # unit vectors with nothing left along the others' mean
        others = sum(v for j, v in before.items() if j != k)
        assert float(np.linalg.norm(r.astype(np.float64))) == pytest.approx(1.0, abs=1e-3)
        assert abs(float(r.astype(np.float64) @ others)) < 1e-2
    back = decode(encode(out["a"]), 8)
    assert back is not None and back.tobytes() == out["a"].tobytes()
    assert decode(encode(out["a"]), 9) is None  # stored under other bits: not compared
    assert long_lag_similarity(out["a"], []) is None
    assert long_lag_similarity(out["a"], [out["a"]]) == pytest.approx(1.0, abs=1e-6)


def test_evidence_is_a_capped_cusum_and_an_unmeasured_window_keeps_it() -> None:
    assert next_evidence(0.0, 0.5, CFG) == CFG.step_cap  # one window counts for at most step_cap
    assert next_evidence(0.03, None, CFG) == 0.03
    assert next_evidence(0.01, -0.5, CFG) == 0.0
    assert next_evidence(CFG.cap, 0.5, CFG) == CFG.cap
    assert not drifting(1.0, PersistenceConfig(enabled=False, gate=True))
    assert drifting(1.0, PersistenceConfig())  # the gate is on by default
    assert not drifting(1.0, PersistenceConfig(gate=False)) and over_alarm(
        1.0, PersistenceConfig(gate=False)
    )  # measured, not gated
    with pytest.raises(ValueError):
        PersistenceConfig(reference=0.01, alarm=0.005)


def test_the_selection_leaves_a_drifting_peer_out() -> None:
    def peer(key: str, drift: bool) -> Candidate:
        return Candidate(key, final=1.0, proven=True, gain=0.1, indicator=1, drifting=drift)

    chosen = select_aggregation([peer("a", False), peer("b", False), peer("c", True)])
    assert chosen.gather == ("a", "b")


def test_the_loader_reads_the_lag_to_horizon_windows_and_skips_other_hashes_and_sizes() -> None:
    from storage.sketch_rows import SketchRecord
    from validator.round.drift import sketch_loader

    cfg = PersistenceConfig(bits=8)
    good = encode(np.ones(256, np.float16))
    asked: list[tuple[int, int]] = []

    class Ledger:
        def sketches(
            self, hotkeys: Collection[str], first: int, last: int
        ) -> dict[str, list[tuple[int, SketchRecord]]]:
            asked.append((first, last))
            rows = [
                (5, SketchRecord("a", 7, good)),
                (6, SketchRecord("a", 8, good)),
                (7, SketchRecord("a", 7, b"x")),
            ]
            return {"a": rows}

    load = sketch_loader(Ledger(), 20, 7, cfg)  # type: ignore[arg-type]
    out = load(["a"])
    assert asked == [(20 - cfg.horizon, 20 - cfg.lag)]
    assert len(out["a"]) == 1  # another secret's hash (8) and a sketch of another size are skipped
    assert sketch_loader(Ledger(), 1, 7, cfg)(["a"]) == {}  # nothing is `lag` windows old yet


def test_earlier_sketches_are_read_a_few_peers_at_a_time() -> None:
    from validator.round.drift import LOAD_PEERS

    rng = np.random.default_rng(4)
    peers = [Peer(f"p{i:02d}", rng.standard_normal(N)).window for i in range(2 * LOAD_PEERS + 3)]
    calls: list[int] = []

    def earlier(hotkeys: Collection[str]) -> Mapping[str, Sequence[F16]]:
        calls.append(len(hotkeys))
        return {}

    drift = measure_drift(peers, CFG, 11, earlier)
    assert calls == [LOAD_PEERS, LOAD_PEERS, 3]  # the window never holds every peer's history at once
    assert len(drift.residuals) == len(peers) and drift.similarity == {}
    assert all(len(data) == 2 << CFG.bits for data in drift.residuals.values())


def test_operators_set_the_check_and_its_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from validator.settings import Settings
    from validator.wiring import round_config

    for key in [k for k in os.environ if k.startswith("GAUNTLET_")]:
        monkeypatch.delenv(key)
    default = round_config(Settings()).ranking.persistence
    assert default.enabled and default.gate and default.bits == 14  # measured, shown and acted on
    monkeypatch.setenv("GAUNTLET_PERSISTENCE_GATE", "false")
    monkeypatch.setenv("GAUNTLET_PERSISTENCE_BITS", "16")
    shown = round_config(Settings()).ranking.persistence
    assert not shown.gate and shown.bits == 16
    monkeypatch.setenv("GAUNTLET_PERSISTENCE_BITS", "30")
    with pytest.raises(ValueError):
        Settings()
