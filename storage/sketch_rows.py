"""Each compared peer's residual sketch per window (scoring/persistence.py), as the window's record
carries it and as its rows are written; `storage/queries.py` reads them back, `storage/writer.py`
prunes them."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SketchRecord:
    """A peer's residual sketch in one window (float16 bytes) and the hash seed it was taken with."""

    hotkey: str
    seed: int  # below 2^64; stored as its two's complement in a signed 64-bit column
    data: bytes


def signed_seed(seed: int) -> int:
    return seed - (1 << 64) if seed >= 1 << 63 else seed


def unsigned_seed(value: int) -> int:
    return value + (1 << 64) if value < 0 else value


def sketch_rows(records: Collection[SketchRecord], window: int) -> list[dict[str, Any]]:
    return [
        {"window": window, "hotkey": r.hotkey, "seed": signed_seed(r.seed), "data": r.data} for r in records
    ]
