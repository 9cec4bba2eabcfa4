"""Each compared peer's residual sketch per window (scoring/persistence.py): written with the window,
read back by the windows after it and by replay."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session


@dataclass(frozen=True, slots=True)
class SketchRecord:
    """A peer's residual sketch in one window (float16 bytes) and the hash seed it was taken with."""

    hotkey: str
    seed: int  # below 2^64; stored as its two's complement in a signed 64-bit column
    data: bytes


def _signed(seed: int) -> int:
    return seed - (1 << 64) if seed >= 1 << 63 else seed


def _unsigned(value: int) -> int:
    return value + (1 << 64) if value < 0 else value


def sketch_rows(records: Collection[SketchRecord], window: int) -> list[dict[str, Any]]:
    return [{"window": window, "hotkey": r.hotkey, "seed": _signed(r.seed), "data": r.data} for r in records]


def earlier_sketches(
    session: Session, hotkeys: Collection[str], first: int, last: int
) -> dict[str, list[tuple[int, SketchRecord]]]:
    """Each of `hotkeys`' sketches from windows `first` … `last` (inclusive), oldest first."""
    from storage.models import ResidualSketch  # models import records, which import this module

    rows = session.execute(
        select(ResidualSketch)
        .where(ResidualSketch.window.between(first, last), ResidualSketch.hotkey.in_(sorted(hotkeys)))
        .order_by(ResidualSketch.hotkey, ResidualSketch.window)
    ).scalars()
    out: dict[str, list[tuple[int, SketchRecord]]] = {}
    for r in rows:
        out.setdefault(r.hotkey, []).append((r.window, SketchRecord(r.hotkey, _unsigned(r.seed), r.data)))
    return out


def window_sketch_seed(session: Session, window: int) -> int | None:
    """The hash seed `window`'s sketches were taken with; None when it stored none."""
    from storage.models import ResidualSketch

    value = session.execute(
        select(ResidualSketch.seed).where(ResidualSketch.window == window).limit(1)
    ).scalar_one_or_none()
    return None if value is None else _unsigned(value)


def prune_sketches(session: Session, before: int) -> int:
    """Delete the sketches of windows before `before`; how many rows went."""
    from storage.models import ResidualSketch

    result = session.execute(delete(ResidualSketch).where(ResidualSketch.window < before))
    return int(getattr(result, "rowcount", 0) or 0)
