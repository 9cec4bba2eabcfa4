"""Ratings from the window's outcomes, the aggregation set, and chain weights from the ratings.

(The weight *policy* is `scoring.weights.WeightPolicy`; this module's rules are the ranking's.)"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from statistics import median

from scoring.claims import ClaimConfig, claim_gaps
from scoring.clipping import clipped_mass, inflation
from scoring.earnings import by_work, paid, ranked_by_uid, worked
from scoring.links import LinkConfig, linked_pairs
from scoring.loss_score import retention
from scoring.persistence import PersistenceConfig, drifting
from scoring.proof import proven
from scoring.ranking import (
    PeerOutcome,
    RatingConfig,
    RatingState,
    Status,
    update_ratings,
)
from scoring.selection import Candidate, Selection, SelectionConfig, left_out_for_cause, select_aggregation
from scoring.twins import NEAR_TIE, NO_TWINS, Twins, paired_t
from scoring.types import Reason
from scoring.uniqueness import CopyCheck, unclear_pairs
from scoring.weights import WeightPolicy
from validator.round.outcomes import PeerWindow, page_tests
from validator.round.pair_evidence import tied_pairs, with_pair_evidence


@dataclass(frozen=True, slots=True)
class RankingConfig:
    """How peers are rated and which of them are aggregated."""

    rating: RatingConfig = RatingConfig()
    selection: SelectionConfig = SelectionConfig()
    links: LinkConfig = LinkConfig()
    persistence: PersistenceConfig = PersistenceConfig()
    claims: ClaimConfig = ClaimConfig()


def _status(p: PeerWindow) -> Status:
    """A peer the fetch never got to is `skipped`: the validator's budget ran out, not the peer."""
    return Status.SKIPPED if p.reason == Reason.NOT_ATTEMPTED else Status(p.status)


def outcomes_of(
    peers: Sequence[PeerWindow],
    reference: Mapping[str, float] | None = None,
    outside: Collection[str] = frozenset(),
    proof_t: Mapping[str, float] | None = None,
) -> list[PeerOutcome]:
    """The rating input of each peer. A valid, evaluated submission is in sync by construction:
    its base matched and it was on time, or the checks would have rejected it. `outside`: evaluated
    peers left out of the rating match (`outside_match`); `proof_t`: the page test each peer's proof
    reads (`proof_tests`), its own t where not given."""
    relative = relative_retentions(peers, reference)
    proof_t = page_tests(peers) if proof_t is None else proof_t
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
                own_t=proof_t.get(p.hotkey) if e is not None and p.valid else None,
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
    `reference`: the window's clip reference (`relative_retentions`). The window's evidence is folded
    in first with nobody matched, so that `outside_match` reads what the selection will."""
    tests = proof_tests(state, peers, copies, cfg)

    def rated(outside: Collection[str]) -> RatingState:
        fresh = update_ratings(state, window, outcomes_of(peers, reference, outside, tests), cfg.rating)
        return with_pair_evidence(fresh, copies, peers, cfg.links, cfg.claims)

    return rated(outside_match(rated({p.hotkey for p in peers}), peers, window, cfg, copies, reference))


def proof_tests(
    state: RatingState, peers: Sequence[PeerWindow], copies: CopyCheck, cfg: RankingConfig
) -> dict[str, float]:
    """The page test each evaluated peer's proof reads this window: an unproven sender tied by a copy
    finding to evaluated peers reads its own against theirs (scoring/twins.py `paired_t`)."""
    tests = page_tests(peers)
    unproven = {h for h in tests if h not in state.peers or not proven(state.peers[h], cfg.rating)}
    return paired_t([(f.other, f.offender) for f in copies.findings], tests, unproven)


def outside_match(
    evidence: RatingState,
    peers: Sequence[PeerWindow],
    window: int,
    cfg: RankingConfig,
    copies: CopyCheck,
    reference: Mapping[str, float] | None = None,
) -> frozenset[str]:
    """The evaluated peers whose held-out gain at β overstates their work: those the selection, over
    the same candidates, leaves out for a cause its gain does not show (scoring/selection.py
    `left_out_for_cause`: an inflated norm, a low retention, links, a drifting direction), read from
    `evidence`, the ratings with this window's evidence and links and no match (`rate_window`; the
    window's drift evidence is in the state it is handed: validator/round/pipeline.py
    `rate_and_select`).
    In the match their wins pushed honest μ down and them to the top of the leaderboard (README,
    *Scoring fidelity*). They stay out of it: μ and σ keep their values, while their evidence
    (proof, retention, links) is still folded in.

    A peer that has not proven its training plays no match either, as it is not aggregated: in a
    fresh network's first windows colluders (before their links form), `sandbag_matched` (before its
    retention is read) and inflated updates (before the selection admits anybody, so before there is
    a band) won matches whose μ the honest peers never got back (README, *Scoring fidelity*).
    Nor does a banned one: it is not aggregated either, and once it had proven its training again
    (its rating is reset when the ban starts), an inflated update won every match of the ban, took
    honest μ down with it and came out of the ban at the top of the leaderboard (a red-team run)."""
    twins = twins_of(evidence, copies, cfg, peers)
    candidates = _candidates(evidence, peers, window, cfg, reference)
    barred = {c.key for c in candidates if not c.proven or c.banned}
    return frozenset(barred) | left_out_for_cause(candidates, cfg.selection, twins)


def _linked(state: RatingState, cfg: RankingConfig, share: float = 1.0) -> list[tuple[str, str]]:
    """The pairs whose link evidence reached the alarm (scoring/links.py) between peers that have
    both proven their training. A link to an identity that has not proven anything is not acted on:
    it cannot be aggregated anyway, and an honest peer linked to one (its copier, evaluated beside it
    while neither was proven: scoring/copy_findings.py `oriented`; or `lazy`) left the links'
    consensus, then read as linked with more adversaries each window and was left out with them in
    a group (bench_fidelity, mixed: honest coverage 1.00 → 0.50). Colluders train: once proven, their
    links count. The evidence itself accrues either way."""
    pairs = linked_pairs({h: p.links for h, p in state.peers.items()}, cfg.links, share)
    trained = {h for h, r in state.peers.items() if proven(r, cfg.rating)}
    return [(a, b) for a, b in pairs if a in trained and b in trained]


def linked_peers(state: RatingState, cfg: RankingConfig) -> set[str]:
    """Every peer in a linked pair of proven peers (`_linked`)."""
    return {h for pair in _linked(state, cfg) for h in pair}


def twins_of(
    state: RatingState, copies: CopyCheck, cfg: RankingConfig, peers: Sequence[PeerWindow] = ()
) -> Twins:
    """Pairs of which at most one is aggregated (scoring/twins.py): copies whose upload order was
    unclear, and pairs linked across windows. Only links between proven peers count (`_linked`): two
    sybils sending noisy copies of a victim's update from stores that hid from the polls linked with
    it and each other, and the three, a "colluding group", sank the victim. The upload order of a
    linked pair decides nothing, as between any two proven peers (scoring/copy_findings.py
    `oriented`): the later uploader was left out alone, out of the match and unpaid, and a proven
    identity that computed its victim's update from public inputs and sent it (or a tenth of it
    mixed into its own training) first made the victim the later uploader in every window (two
    red-team runs, 2026-12-07). `peers`' page tests this window decide which sender is kept."""
    unclear = [f for f in copies.findings if not f.clear]
    same = [(f.other, f.offender) for f in unclear if f.reason == Reason.DUPLICATE_PAYLOAD or f.same_update]
    pairs = tuple(sorted(unclear_pairs(unclear)))
    near = _linked(state, cfg, NEAR_TIE)  # the proof read once: the linked pairs are among these
    alarmed = set(linked_pairs({h: p.links for h, p in state.peers.items()}, cfg.links))
    linked = tuple(pair for pair in near if pair in alarmed)
    tests = page_tests(peers)
    claims = claim_gaps({h: p.claims for h, p in state.peers.items()}, tied_pairs(copies), tests)
    return Twins(pairs, tuple(sorted(same)), linked, copies.seen, tests, copies.readings, tuple(near), claims)


def select_window(
    state: RatingState,
    peers: Sequence[PeerWindow],
    window: int,
    cfg: RankingConfig,
    twins: Twins = NO_TWINS,
    reference: Mapping[str, float] | None = None,
) -> Selection[str]:
    """Every peer that proved its training and contributes, ordered by final score
    (scoring/selection.py); `twins` (`twins_of`): pairs of which at most one may be aggregated."""
    candidates = _candidates(state, peers, window, cfg, reference)
    return select_aggregation(candidates, cfg.selection, twins)


def _candidates(
    state: RatingState,
    peers: Sequence[PeerWindow],
    window: int,
    cfg: RankingConfig,
    reference: Mapping[str, float] | None = None,
) -> list[Candidate]:
    """Each valid, rated peer as the selection sees it."""
    candidates = []
    for p in peers:
        rating, e = state.peers.get(p.hotkey), p.evaluation
        if not p.valid or rating is None:
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
    return candidates


def weights_for(state: RatingState, window: int, policy: WeightPolicy, paid_windows: int) -> dict[int, float]:
    """`{uid: weight}` from the final scores after `window`, for peers aggregated in the last
    `paid_windows` windows, by the share of them that aggregated each (scoring/earnings.py); banned
    peers get nothing."""
    weights = policy.compute(ranked_by_uid(state, window, paid_windows))
    # the peers aggregated in the period only (a burn uid keeps its share)
    shares = {
        p.uid: worked(p, window, paid_windows) for p in state.peers.values() if paid(p, window, paid_windows)
    }
    return by_work(weights, shares)
