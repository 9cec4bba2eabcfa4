"""THE ranking rule: one order for the API, the dashboard (through the API) and the CLI table."""

from __future__ import annotations

from typing import Any

from storage.records import ordinal


def rank_key(
    final_score: float,
    mu: float,
    sigma: float,
    uid: int,
    hotkey: str = "",
    last_aggregated: int | None = None,
) -> tuple[Any, ...]:
    """THE ranking rule, used by the API, the dashboard (through the API) and the CLI table: best
    final score first; among equal ones (many peers tie at 0) the more recently aggregated first,
    as chain weights pay aggregated work (scoring/earnings.py): a peer the aggregate left out must not
    rank above honest work it won matches against before it was found out; then the better ordinal
    mu - 3 sigma (an ok peer must not rank below an invalid one), then the lower uid; the hotkey only
    makes it total."""
    recency = -1 if last_aggregated is None else last_aggregated
    return (-final_score, -recency, -ordinal(mu, sigma), uid, hotkey)
