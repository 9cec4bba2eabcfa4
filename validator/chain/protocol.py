"""The chain seam: the `Chain` protocol the round loop talks to, its value types, and windows.

Two implementations: `validator.chain.subtensor.SubtensorChain` (the bittensor SDK) and
`validator.chain.local.LocalChain` (a file-backed chain for the demo and end-to-end tests).
Peer storage locations are chain commitments; they are parsed in `validator.stores.commitments`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from validator.stores.commitments import LocationError, LocationPolicy, StorageLocation, parse_location

__all__ = [
    "BLOCK_SECONDS",
    "Chain",
    "LocationError",
    "LocationPolicy",
    "Neuron",
    "StorageLocation",
    "WeightLimits",
    "WeightOutcome",
    "WindowConfig",
    "first_block",
    "parse_location",
    "window_of",
]

# Mainnet block time; LocalChain uses it for deterministic timestamps.
BLOCK_SECONDS = 12.0


@dataclass(frozen=True, slots=True)
class Neuron:
    """One registered uid of the subnet as the metagraph reports it (stake in alpha units)."""

    uid: int
    hotkey: str
    stake: float
    validator_permit: bool


@dataclass(frozen=True, slots=True)
class WeightLimits:
    """The subnet's limits on a weight set: the fewest uids it may name (MinAllowedWeights; a set of
    the validator's own uid alone, a self-weight, is exempt) and the largest share one uid may take
    (MaxWeightsLimit ÷ 65535: the SDK clips above it and spreads the excess over the others)."""

    min_weights: int = 0
    max_share: float = 1.0


@dataclass(frozen=True, slots=True)
class WeightOutcome:
    """What became of one `set_weights` call: `ok`, the chain's or SDK's message, and the head block."""

    ok: bool
    message: str
    block: int


class Chain(Protocol):
    """What the validator needs from a chain: time, the metagraph, commitments, and weights."""

    @property
    def hotkey(self) -> str:
        """The validator's own hotkey, which sets the weights."""
        ...

    def block(self) -> int:
        """Current head block number."""
        ...

    def block_timestamp(self, block: int) -> float:
        """Unix timestamp (seconds) of a block that exists."""
        ...

    def wait_for_block(self, block: int, timeout: float) -> int:
        """Block until the head reaches `block`; returns the head. Raises TimeoutError."""
        ...

    def neurons(self) -> list[Neuron]:
        """The subnet's neurons, ordered by uid."""
        ...

    def commitments(self) -> dict[str, str]:
        """Each hotkey's visible commitment text (untrusted, peer-controlled)."""
        ...

    def weight_limits(self) -> WeightLimits:
        """The subnet's limits on a weight set."""
        ...

    def set_weights(self, weights: dict[int, float]) -> WeightOutcome:
        """Set relative weights per uid; failures are reported in the outcome, never raised."""
        ...


@dataclass(frozen=True, slots=True)
class WindowConfig:
    """How chain blocks map to windows (DESIGN.md §3)."""

    blocks_per_window: int = 115

    def __post_init__(self) -> None:
        if self.blocks_per_window < 1:
            raise ValueError(f"blocks_per_window must be >= 1, got {self.blocks_per_window}")

    def window_of(self, block: int) -> int:
        return window_of(block, self.blocks_per_window)

    def first_block(self, window: int) -> int:
        return first_block(window, self.blocks_per_window)


def window_of(block: int, blocks_per_window: int) -> int:
    """The window a block belongs to: block // blocks_per_window."""
    if block < 0 or blocks_per_window < 1:
        raise ValueError(f"bad block {block} or blocks_per_window {blocks_per_window}")
    return block // blocks_per_window


def first_block(window: int, blocks_per_window: int) -> int:
    """The first block of a window."""
    if window < 0 or blocks_per_window < 1:
        raise ValueError(f"bad window {window} or blocks_per_window {blocks_per_window}")
    return window * blocks_per_window
