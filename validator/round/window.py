"""The window's secret seed, typed: one value, parsed in one place."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import SecretBytes

from scoring.data import window_seed


@dataclass(frozen=True, slots=True)
class WindowSeed:
    """HMAC(validator secret, window) as hex: unpredictable to peers until the window is recorded.

    It orders the fetch, draws the held-out pages and each peer's evaluation pages, samples the
    peers to evaluate and the uniqueness sketches. The record stores `hex`, so replay rebuilds the
    same seed from it."""

    hex: str

    def __post_init__(self) -> None:
        if len(self.hex) < 16:
            raise ValueError("a window seed is at least 64 bits of hex")
        bytes.fromhex(self.hex)  # raises ValueError on anything but hex digits

    @classmethod
    def derive(cls, secret: SecretBytes, window: int) -> WindowSeed:
        return cls(window_seed(secret, window))

    @property
    def number(self) -> int:
        """The seed as an integer, for the samplers that take one: its first 64 bits."""
        return int(self.hex[:16], 16)
