"""THE ranking rule: one order for the API, the dashboard (through the API) and the CLI table."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

from storage.records import ordinal


class Rankable(Protocol):
    """What the rule reads of a peer: a rating in memory or a rating row read back."""

    @property
    def final(self) -> float: ...
    @property
    def mu(self) -> float: ...
    @property
    def sigma(self) -> float: ...
    @property
    def uid(self) -> int: ...
    @property
    def hotkey(self) -> str: ...
    @property
    def last_aggregated(self) -> int | None: ...


R = TypeVar("R", bound=Rankable)


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


def ranked(peers: Iterable[R]) -> list[R]:
    """The leaderboard, best first: every peer that holds a uid, in `rank_key` order. A detached
    peer (uid < 0: a ban remembered for a hotkey that holds no uid) is not a ranked peer."""
    held = (p for p in peers if p.uid >= 0)
    return sorted(held, key=lambda p: rank_key(p.final, p.mu, p.sigma, p.uid, p.hotkey, p.last_aggregated))
