"""The demo's per-window lines and its closing JSON summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scoring.ranking import RatingState
from storage.ranking import ranked
from validator.demo.fidelity import honest_spearman
from validator.round.loop import WindowReport


@dataclass(slots=True)
class DemoSummary:
    behaviour: Mapping[str, str]
    windows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, report: WindowReport, heldout_loss: float) -> dict[str, Any]:
        row = {
            "window": report.window,
            "heldout_loss": round(heldout_loss, 6),
            "window_heldout_loss": round(report.heldout_loss, 6),
            "selected": list(report.selection.gather),
            "selected_behaviours": [self.behaviour.get(h, "?") for h in report.selection.gather],
            "statuses": {p.hotkey: p.status for p in report.peers},
            "reasons": {p.hotkey: p.reason for p in report.peers if p.reason},
            "seconds": round(sum(report.timings.values()), 3),
        }
        self.windows.append(row)
        return row

    def peers(self, state: RatingState) -> list[dict[str, Any]]:
        # how many of this run's windows aggregated each peer: a proven peer among equals can sit at
        # an ordinal ≤ 0 (final 0) and still be aggregated and paid, which the final alone hides
        aggregated: dict[str, int] = {}
        for row in self.windows:
            for h in row["selected"]:
                aggregated[h] = aggregated.get(h, 0) + 1
        # The API's ranking rule, so the table, /v1/peers and the dashboard agree.
        board = ranked(state.peers.values())
        return [
            {
                "uid": r.uid,
                "hotkey": r.hotkey,
                "behaviour": self.behaviour.get(r.hotkey, "?"),
                "final_score": r.final,
                "rank": i + 1,
                "mu": r.mu,
                "sigma": r.sigma,
                "bma": r.bma,
                "aggregated_windows": aggregated.get(r.hotkey, 0),
            }
            for i, r in enumerate(board)
        ]

    def to_json(self, state: RatingState) -> dict[str, Any]:
        peers = self.peers(state)
        return {"windows": self.windows, "peers": peers, "spearman": honest_spearman(peers)}


def window_line(row: Mapping[str, Any], behaviour: Mapping[str, str]) -> str:
    counts: dict[str, int] = {}
    for status in row["statuses"].values():
        counts[status] = counts.get(status, 0) + 1
    chosen = ", ".join(sorted(behaviour.get(h, "?") for h in row["selected"])) or "nobody"
    status = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
    return (
        f"window {row['window']}: held-out loss {row['heldout_loss']:.4f} | {status} | aggregated: {chosen}"
    )


def leaderboard_lines(peers: Sequence[Mapping[str, Any]]) -> list[str]:
    """The closing table; `agg`: the windows of this run that aggregated the peer."""
    columns = f"{'rank':>4} {'uid':>4} {'behaviour':<11} {'final':>8} {'mu':>7} {'sigma':>6} {'bma':>7}"
    lines = [f"{columns} {'agg':>4}"]
    for p in peers:
        lines.append(
            f"{p['rank']:>4} {p['uid']:>4} {p['behaviour']:<11} {p['final_score']:>8.3f} "
            f"{p['mu']:>7.2f} {p['sigma']:>6.2f} {p['bma']:>7.3f} {p['aggregated_windows']:>4}"
        )
    return lines
