"""The window's norm references (DESIGN.md §5.6): empty updates, norm outliers and the clip reference.

Each is taken over the peers that have proven their training once there are any: new identities
are free, so a crowd of sybils sending tiny updates would otherwise own any statistic over every
valid update, shrinking every honest update to nothing (the clip reference) or rejecting every
honest update as an outlier (the norm check)."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from statistics import median

from scoring.clipping import median_norms, quantile_norms
from scoring.proof import proven
from scoring.ranking import RatingConfig, RatingState
from scoring.types import Reason
from validator.round.check_config import CheckConfig
from validator.round.outcomes import NORM, PeerWindow, judging_failed

RELATIVE_EMPTY = 1e-3  # of the typical norm (`_typical`): a proven norm under it does not count


def proven_peers(state: RatingState, cfg: RatingConfig) -> frozenset[str]:
    """Hotkeys that have proven, before this window, that they train on their own data."""
    return frozenset(hotkey for hotkey, rating in state.peers.items() if proven(rating, cfg))


def clip_reference(
    peers: Sequence[PeerWindow], cfg: CheckConfig, trusted: Collection[str] = frozenset()
) -> dict[str, float]:
    """The window's per-parameter `clip_quantile` norm over valid updates, at most `clip_cap` × their
    median: the clip reference (§5.6).

    Empty parameters (norm ≤ `zero_norm`) do not count, so they cannot drag it to 0. Once
    some valid peers have proven their training (`trusted`), it is taken over theirs alone. A proven
    peer cannot shrink it alone either: per parameter, proven norms under `RELATIVE_EMPTY` × the
    typical norm (`_typical`) do not count, and a parameter without any proven norm left is judged
    over every valid update."""
    valid = [p.update.norms() for p in peers if p.update is not None]
    held = [p.update.norms() for p in peers if p.update is not None and p.hotkey in trusted]
    if not valid:
        return {}
    everyone = median_norms(valid, floor=cfg.zero_norm)
    out = {}
    for name in valid[0]:
        # A proven peer's norm far under the typical one says nothing of the scale: counted, one
        # proven peer sending a parameter empty, or at 1e-12, made it ~0 and clipped every honest
        # update to nothing. A parameter no proven peer really updated is judged over every update.
        floor = max(cfg.zero_norm, RELATIVE_EMPTY * _typical(name, held, everyone[name], cfg))
        column = [{name: n[name]} for n in held if n[name] > floor] or [{name: n[name]} for n in valid]
        upper = quantile_norms(column, cfg.clip_quantile, floor=cfg.zero_norm)[name]
        middle = median_norms(column, floor=cfg.zero_norm)[name]
        # a coalition holding the upper quartile lifts the reference by at most clip_cap × the median
        out[name] = min(upper, cfg.clip_cap * middle)
    return out


def _typical(name: str, held: Sequence[Mapping[str, float]], everyone: float, cfg: CheckConfig) -> float:
    """The scale a proven norm is judged empty against: the median of the proven peers' non-empty
    norms once two or more have one, else every valid update's median. Over every valid update,
    unproven sybils sending the largest values the decoder allows lifted it until the honest proven
    norms read as empty: the reference was then a proven attacker's own 30× norm, which it never
    clipped (an audit's reproducer). One proven peer cannot shrink the proven median alone: of two
    it halves it at most."""
    proven = [n[name] for n in held if n[name] > cfg.zero_norm]
    return median(proven) if len(proven) >= 2 else everyone


def total_norm(p: PeerWindow) -> float:
    assert p.update is not None
    return float(sum(n * n for n in p.update.norms().values()) ** 0.5)


def reject_zero_updates(peers: Sequence[PeerWindow], cfg: CheckConfig) -> list[PeerWindow]:
    """An update with (near) zero total norm is `zero_update`: it says nothing and would capture the
    clip reference. Each peer's norm is computed on its own: one that raises fails only that peer."""
    out = []
    for p in peers:
        try:
            empty = p.update is not None and total_norm(p) <= cfg.zero_norm
        except Exception as e:  # a peer's own update: isolated
            out.append(judging_failed(p, NORM, e))
            continue
        out.append(p.reject(Reason.ZERO_UPDATE, f"update norm <= {cfg.zero_norm:g}") if empty else p)
    return out


def outlier_reference(
    totals: Mapping[str, float], cfg: CheckConfig, trusted: Collection[str] = frozenset()
) -> float | None:
    """The typical total norm an outlier is measured against; None when there is none to speak of.

    The larger of two references, so that an update is an outlier only when both agree: the upper
    quartile of the non-empty norms (nearest rank, never the largest), and the median of the proven
    peers' norms when there are any. Sybils sending small updates must outnumber everyone else three
    to one to lower the first (the plain median fell to a bare majority of them, and every honest
    update was rejected), and only the second restores it then; a proven peer, or a proven
    minority, sending a small update cannot lower it either (taken alone, it could). Lifting it lets
    inflated updates through this check only: the clip reference, the proven peers' and capped at
    `clip_cap` × their median, still bounds them."""
    nonzero = {h: t for h, t in totals.items() if t > cfg.zero_norm}
    if len(nonzero) < 3:  # one or two peers say nothing about outliers
        return None
    ordered = sorted(nonzero.values())
    upper = ordered[min(math.ceil(0.75 * len(ordered)) - 1, len(ordered) - 2)]
    proven_totals = [t for h, t in nonzero.items() if h in trusted]
    return max(upper, median(proven_totals)) if proven_totals else upper


def reject_norm_outliers(
    peers: Sequence[PeerWindow], cfg: CheckConfig, trusted: Collection[str] = frozenset()
) -> list[PeerWindow]:
    """Reject updates whose total norm is above `norm_outlier_factor` × `outlier_reference`."""
    totals = {p.hotkey: total_norm(p) for p in peers if p.update}
    reference = outlier_reference(totals, cfg, trusted)
    if reference is None:
        return list(peers)
    limit = cfg.norm_outlier_factor * reference
    return [
        p.reject(Reason.NORM_OUTLIER, f"norm {totals[p.hotkey]:.3g} > {cfg.norm_outlier_factor}× typical")
        if p.hotkey in totals and totals[p.hotkey] > limit
        else p
        for p in peers
    ]
