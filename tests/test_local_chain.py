"""LocalChain: a deterministic chain in a SQLite file."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from validator.chain.local import LocalChain, LocalChainConfig, WeightSet
from validator.chain.protocol import Chain, Neuron, WeightOutcome


def make(tmp_path: Path, **kwargs: object) -> LocalChain:
    return LocalChain(LocalChainConfig(path=tmp_path / "chain.sqlite", **kwargs))  # type: ignore[arg-type]


def test_is_a_chain_with_a_deterministic_clock(tmp_path: Path) -> None:
    chain: Chain = make(tmp_path, genesis_time=1000.0)
    assert chain.block() == 0
    assert chain.block_timestamp(0) == 1000.0
    assert chain.block_timestamp(10) == 1120.0
    assert isinstance(chain, LocalChain)
    assert chain.advance(5) == 5
    assert chain.block() == 5
    with pytest.raises(ValueError):
        chain.advance(-1)


def test_wait_for_block_jumps_the_clock(tmp_path: Path) -> None:
    chain = make(tmp_path)
    assert chain.wait_for_block(230, timeout=1.0) == 230
    assert chain.wait_for_block(10, timeout=1.0) == 230  # already past


def test_wait_for_block_without_auto_advance_times_out(tmp_path: Path) -> None:
    chain = make(tmp_path, auto_advance=False, poll_seconds=0.01)
    with pytest.raises(TimeoutError):
        chain.wait_for_block(3, timeout=0.05)
    # Another handle on the same file (another process in the demo) drives the clock.
    make(tmp_path).advance(3)
    assert chain.wait_for_block(3, timeout=0.05) == 3


def test_registry_and_commitments(tmp_path: Path) -> None:
    chain = make(tmp_path, validator_hotkey="val")
    assert chain.register("val", stake=100.0, permit=True) == 0
    assert chain.register("peer-a") == 1
    assert chain.register("peer-b", uid=5, stake=2.5) == 5
    chain.advance(7)
    chain.commit("peer-a", "file:///tmp/a")
    assert chain.neurons() == [
        Neuron(0, "val", 100.0, True),
        Neuron(1, "peer-a", 0.0, False),
        Neuron(5, "peer-b", 2.5, False),
    ]
    assert chain.commitments() == {"peer-a": "file:///tmp/a"}
    with pytest.raises(LookupError):
        chain.commit("nobody", "file:///tmp/x")


def test_recycled_uid_is_a_new_peer_without_the_old_commitment(tmp_path: Path) -> None:
    chain = make(tmp_path)
    chain.register("old", uid=3)
    chain.commit("old", "file:///tmp/old")
    chain.register("new", uid=3)
    assert chain.neurons() == [Neuron(3, "new", 0.0, False)]
    assert chain.commitments() == {}


def test_weights_are_recorded_and_read_back(tmp_path: Path) -> None:
    chain = make(tmp_path, validator_hotkey="val")
    for hotkey in ("val", "a", "b"):
        chain.register(hotkey)
    chain.advance(12)
    assert chain.set_weights({2: 0.25, 1: 0.75}) == WeightOutcome(True, "weights set for 2 uids", 12)
    assert chain.weight_sets() == [WeightSet(12, "val", {1: 0.75, 2: 0.25})]
    # The same file opened again sees the same history.
    assert make(tmp_path).weight_sets() == chain.weight_sets()


@pytest.mark.parametrize(
    ("weights", "fragment"),
    [
        ({9: 1.0}, "unknown uids [9]"),
        ({1: -1.0}, "non-negative"),
        ({1: math.nan}, "finite"),
        ({1: 0.0}, "All weights are zero"),
    ],
)
def test_bad_weights_are_refused(tmp_path: Path, weights: dict[int, float], fragment: str) -> None:
    chain = make(tmp_path, validator_hotkey="val")
    chain.register("val")
    chain.register("a")
    outcome = chain.set_weights(weights)
    assert not outcome.ok and fragment in outcome.message
    assert chain.weight_sets() == []


def test_unregistered_validator_and_rate_limit(tmp_path: Path) -> None:
    chain = make(tmp_path, validator_hotkey="val", weights_rate_limit=10)
    chain.register("a")
    assert "NotRegistered" in chain.set_weights({0: 1.0}).message
    chain.register("val")
    assert chain.set_weights({0: 1.0}).ok
    chain.advance(9)
    refused = chain.set_weights({0: 1.0})
    assert not refused.ok and "rate limit 10" in refused.message
    chain.advance(1)
    assert chain.set_weights({0: 1.0}).ok


@pytest.mark.parametrize(
    "kwargs", [{"validator_hotkey": ""}, {"block_seconds": 0.0}, {"weights_rate_limit": -1}]
)
def test_config_validation(tmp_path: Path, kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        LocalChainConfig(path=tmp_path / "c.sqlite", **kwargs)  # type: ignore[arg-type]
