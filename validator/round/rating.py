"""Ratings from the window's outcomes, the aggregation set, and chain weights from the ratings.

(The weight *policy* is `scoring.weights.WeightPolicy`; this module's rules are the ranking's.)"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import median

from scoring.clipping import clipped_mass, inflation
from scoring.earnings import ranked_by_uid
from scoring.links import LinkConfig, linked_pairs, update_links
from scoring.loss_score import retention
from scoring.page_test import own_t
from scoring.persistence import PersistenceConfig, drifting
from scoring.proof import proven, retention_after
from scoring.ranking import (
    PeerOutcome,
    RatingConfig,
    RatingState,
    Status,
    update_ratings,
)
from scoring.selection import (
    Candidate,
    Selection,
    SelectionConfig,
    clusters,
    inflation_limit,
    select_aggregation,
)
from scoring.types import Reason
from scoring.uniqueness import CopyCheck, unclear_pairs
from scoring.weights import WeightPolicy
from validator.round.outcomes import PeerWindow


@dataclass(frozen=True, slots=True)
class RankingConfig:
    """How peers are rated and which of them are aggregated."""

    rating: RatingConfig = RatingConfig()
    selection: SelectionConfig = SelectionConfig()
    links: LinkConfig = LinkConfig()
    persistence: PersistenceConfig = PersistenceConfig()


def _status(p: PeerWindow) -> Status:
    """A peer the fetch never got to is `skipped`: the validator's budget ran out, not the peer."""
    return Status.SKIPPED if p.reason == Reason.NOT_ATTEMPTED else Status(p.status)


def outcomes_of(
    peers: Sequence[PeerWindow],
    reference: Mapping[str, float] | None = None,
    outside: Collection[str] = frozenset(),
) -> list[PeerOutcome]:
    """The rating input of each peer. A valid, evaluated submission is in sync by construction:
    its base matched and it was on time, or the checks would have rejected it. `outside`: evaluated
    peers left out of the rating match (`outside_match`)."""
    relative = relative_retentions(peers, reference)
    out = []
    for p in peers:
        e = p.evaluation
        out.append(
            PeerOutcome(
                hotkey=p.hotkey,
                uid=p.uid,
                status=_status(p),
                score=e.score if e is not None and p.valid else None,
                indicator=e.indicator if e is not None and p.valid else None,
                sync=1.0,
                copy_tier=p.copy_tier,
                own_gain=e.own_gain if e is not None and p.valid else None,
                retention=relative.get(p.hotkey),
                own_t=own_t(e.pages) if e is not None and p.valid else None,
                matched=p.hotkey not in outside,
            )
        )
    return out


# A full-size update sits at least this × the clip reference (clipping.inflation): honest ones at
# 0.94-1.01 in the demo's runs, graded ones at 0.17-0.49, an honest update halved at 0.5
FULL_SIZE = 0.75
# The least median retention (gain at the probe step ÷ gain at β, 5 for a linear loss) at which a
# window's retentions are compared: under it the probe step is past the loss's curvature for the
# typical update, and ratios to that median read noise (late in a 24-window demo run, medians of
# 0.37 and −11 in windows where held-out gains were near 0; 2.0-5.6 in every other window)
MIN_TYPICAL_RETENTION = 1.0


def relative_retentions(
    peers: Sequence[PeerWindow], reference: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Each valid evaluated peer's retention ÷ the median of the window's full-size updates
    (scoring/loss_score.py); none with fewer than three of them measured, as no median of fewer is
    worth comparing with, or with that median under `MIN_TYPICAL_RETENTION`. A smaller step along
    the same update is more linear: four identities sending honest updates halved (retention
    1.03-1.06 of the median) lifted the median of every update and left honest peers out in three of
    five windows; their size keeps them out of the reference now. Without a `reference` every update
    counts as full-size."""
    measured, full = {}, []
    for p in peers:
        if p.valid and p.evaluation is not None and (r := retention(p.evaluation)) is not None:
            measured[p.hotkey] = r
            size = (
                FULL_SIZE if reference is None or p.update is None else inflation(p.update.norms(), reference)
            )
            if size >= FULL_SIZE:
                full.append(r)
    typical = median(full) if len(full) >= 3 else 0.0
    return {h: r / typical for h, r in measured.items()} if typical >= MIN_TYPICAL_RETENTION else {}


def rate_window(
    state: RatingState,
    peers: Sequence[PeerWindow],
    window: int,
    cfg: RankingConfig,
    copies: CopyCheck,
    reference: Mapping[str, float] | None = None,
) -> RatingState:
    """The ratings after `window`, each peer's links across windows (scoring/links.py) included;
    `reference`: the window's clip reference (`relative_retentions`)."""
    outside = outside_match(state, peers, cfg, copies, reference)
    rated = update_ratings(state, window, outcomes_of(peers, reference, outside), cfg.rating)
    before = {h: p.links for h, p in rated.peers.items() if p.links}
    links = update_links(before, copies.compared, copies.resemblances, cfg.links)
    linked = {
        h: replace(p, links={o: v for o, v in links.get(h, {}).items() if o in rated.peers})
        for h, p in rated.peers.items()
    }
    return RatingState(linked, rated.window)


def outside_match(
    state: RatingState,
    peers: Sequence[PeerWindow],
    cfg: RankingConfig,
    copies: CopyCheck,
    reference: Mapping[str, float] | None = None,
) -> frozenset[str]:
    """The evaluated peers whose held-out gain at β overstates their work, by the selection's own
    rules: an update inflated past the window's honest band (`sandbag`), a retention average with
    this window's under `min_retention` (`sandbag_matched`), the later side of a linked pair and every
    member of a group of three or more (`collude`), and a drifting peer (persistence gate on). The
    selection leaves them out of the aggregate; in the match their wins pushed honest μ down and
    them to the top of the leaderboard (README, *Scoring fidelity*). They stay out of it: μ and σ
    keep their values, while their evidence (proof, retention, links) is still folded in."""
    gains = {p.hotkey: p.evaluation.score for p in peers if p.valid and p.evaluation is not None}
    scored = [p for p in peers if p.hotkey in gains]
    out: set[str] = set()
    if reference:  # the band as the selection draws it: from the updates that gained
        sizes = {p.hotkey: inflation(p.update.norms(), reference) for p in scored if p.update is not None}
        gaining = [size for h, size in sizes.items() if gains[h] > 0.0]
        out |= {h for h, size in sizes.items() if size > inflation_limit(gaining, cfg.selection)}
    relative, floor = relative_retentions(peers, reference), cfg.selection.min_retention
    for p in scored:
        if (rating := state.peers.get(p.hotkey)) is None:
            continue
        r = relative.get(p.hotkey)
        average = rating.retention if r is None else retention_after(rating, r, cfg.rating)
        if (average is not None and average < floor) or drifting(rating.drift, cfg.persistence):
            out.add(p.hotkey)
    # links with this window's evidence, as the selection reads them after the match
    now = update_links(
        {h: p.links for h, p in state.peers.items() if p.links},
        copies.compared,
        copies.resemblances,
        cfg.links,
    )
    kin = twins_of(
        RatingState({h: replace(p, links=now.get(h, {})) for h, p in state.peers.items()}), copies, cfg
    )
    out |= set(kin.later) | {h for group in clusters(kin.twins) if len(group) > 2 for h in group}
    # only a gain worth aggregating can overstate anything: under the selection's floor a peer plays,
    # and loses (a `noise` peer's near-zero gains read as a low retention, and kept out of the match
    # it no longer lost to the honest peers: their μ fell 2-5 in the demo)
    positive = [g for g in gains.values() if g > 0.0]
    floor = cfg.selection.gain_floor * median(positive) if positive else 0.0
    return frozenset(h for h in out if h in gains and gains[h] > 0.0 and gains[h] >= floor)


@dataclass(frozen=True, slots=True)
class Resembling:
    """Who resembles whom this window, as the selection uses it (`twins_of`)."""

    twins: Sequence[tuple[str, str]] = ()  # at most one of each pair is aggregated
    later: Collection[str] = frozenset()  # left out: the later side of a linked pair


def _linked(state: RatingState, cfg: RankingConfig) -> list[tuple[str, str]]:
    return linked_pairs({h: p.links for h, p in state.peers.items()}, cfg.links)


def linked_peers(state: RatingState, cfg: RankingConfig) -> set[str]:
    """Every peer in a pair whose link evidence reached the alarm (scoring/links.py)."""
    return {h for pair in _linked(state, cfg) for h in pair}


def twins_of(state: RatingState, copies: CopyCheck, cfg: RankingConfig) -> Resembling:
    """(twins, later): pairs of which at most one is aggregated, copies whose upload order was unclear
    and linked pairs whose order this window is unclear (colluders upload together); and the later
    uploader of each linked pair whose order is clear, left out alone (a persistent copier must not
    drag the peer it copies out of the aggregate with it)."""
    twins, later = set(unclear_pairs(copies.findings)), set()
    for a, b in _linked(state, cfg):
        first = copies.first.get((a, b))
        if first is None:
            twins.add((a, b))
        else:
            later.add(b if first == a else a)
    return Resembling(sorted(twins), frozenset(later))


def select_window(
    state: RatingState,
    peers: Sequence[PeerWindow],
    window: int,
    cfg: RankingConfig,
    kin: Resembling = Resembling(),
    reference: Mapping[str, float] | None = None,
) -> Selection[str]:
    """Every peer that proved its training and contributes, ordered by final score
    (scoring/selection.py); `twins` (`twins_of`): pairs of which at most one may be aggregated."""
    candidates = []
    for p in peers:
        rating, e = state.peers.get(p.hotkey), p.evaluation
        if not p.valid or rating is None or p.hotkey in kin.later:
            continue
        norms = p.update.norms() if p.update is not None else None
        candidates.append(
            Candidate(
                key=p.hotkey,
                final=rating.final,
                proven=proven(rating, cfg.rating),
                gain=e.score if e is not None else None,
                indicator=e.indicator if e is not None else None,
                banned=rating.banned(window),
                neg_streak=rating.consecutive_negative,
                mass=1.0 if norms is None or reference is None else clipped_mass(norms, reference),
                inflation=0.0 if norms is None or reference is None else inflation(norms, reference),
                retention=rating.retention,
                drifting=drifting(rating.drift, cfg.persistence),
            )
        )
    return select_aggregation(candidates, cfg.selection, kin.twins)


def weights_for(state: RatingState, window: int, policy: WeightPolicy, paid_windows: int) -> dict[int, float]:
    """`{uid: weight}` from the final scores after `window`, for peers aggregated in the last
    `paid_windows` windows (scoring/earnings.py); banned peers get nothing."""
    return policy.compute(ranked_by_uid(state, window, paid_windows))
