"""Reads for the dashboard's charts: per committed window, the held-out loss, peers by status, stage
timings and weight-setting outcomes. A handful of grouped queries over the newest N windows."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from storage import models as m
from storage.records import COMMITTED
from storage.writer import utc


@dataclass(frozen=True, slots=True)
class WindowTrend:
    """One committed window as the dashboard charts it.

    `heldout_loss` is the global model's loss on the window's held-out pages before its aggregate
    was applied (the evaluations' shared `loss_rand_before`); None when nobody was evaluated.
    `weight_outcomes` lists the weight-setting attempts recorded for the window, oldest first.
    """

    window: int
    committed_at: datetime | None
    heldout_loss: float | None
    statuses: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    n_selected: int = 0
    weight_outcomes: list[str] = field(default_factory=list)


def _numbers(timings: dict[str, object]) -> dict[str, float]:
    """The stage timings that are numbers (the column is free-form JSON)."""
    return {k: float(v) for k, v in timings.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def window_trends(*, session: Session, limit: int = 100) -> list[WindowTrend]:
    """The newest `limit` committed windows, oldest first."""
    w = m.Window
    headers = session.execute(
        select(w.window, w.committed_at, w.timings)
        .where(w.state == COMMITTED)
        .order_by(w.window.desc())
        .limit(limit)
    ).all()
    if not headers:
        return []
    first = min(h[0] for h in headers)
    in_range = (first, headers[0][0])
    # (A Result has .keys(), so dict() would take it for a mapping: build the dicts explicitly.)
    loss = {
        win: value
        for win, value in session.execute(
            select(m.Evaluation.window, func.min(m.Evaluation.loss_rand_before))
            .where(m.Evaluation.window.between(*in_range))
            .group_by(m.Evaluation.window)
        )
    }
    statuses: dict[int, dict[str, int]] = defaultdict(dict)
    for win, status, n in session.execute(
        select(m.Submission.window, m.Submission.status, func.count())
        .where(m.Submission.window.between(*in_range))
        .group_by(m.Submission.window, m.Submission.status)
    ):
        statuses[win][status] = n
    selected = {
        win: n
        for win, n in session.execute(
            select(m.Selection.window, func.count())
            .where(m.Selection.window.between(*in_range))
            .group_by(m.Selection.window)
        )
    }
    outcomes: dict[int, list[str]] = defaultdict(list)
    for win, outcome in session.execute(
        select(m.WeightSet.window, m.WeightSet.outcome)
        .where(m.WeightSet.window.between(*in_range))
        .order_by(m.WeightSet.id)
    ):
        outcomes[win].append(outcome)
    return [
        WindowTrend(
            window=win,
            committed_at=utc(at),
            heldout_loss=loss.get(win),
            statuses=dict(sorted(statuses[win].items())),
            timings=_numbers(timings or {}),
            n_selected=selected.get(win, 0),
            weight_outcomes=outcomes[win],
        )
        for win, at, timings in reversed(headers)
    ]
