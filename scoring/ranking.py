"""Persistent ratings and the final score (DESIGN.md §6, §7).

The state is an explicit value: `update_ratings(state, window, outcomes, cfg)` returns a new state
and touches nothing else, so storage can persist it and replay can recompute it bit for bit.

Choices where the design leaves room (all configurable):
- the final score is a proven peer's ordinal × sync: one −1 indicator (a coin flip for honest peers)
  cost a full peer 23 % as a factor; the BMA gates it from the (warm-up + 1)-th *evaluation* on,
  and averages the ±1 the proof counts (a margin within `proof_tie` of 0 is +1: two −1s by a hair
  gated a ¼-steps peer aggregated in bench_fidelity's weak_half, seed 2, out of its pay);
- a valid submission that was not sampled for evaluation keeps its final score as it was;
- only evaluated peers enter the match: missing or invalid peers are penalised on their own, not
  beaten as opponents (that lifted every evaluated peer, cheaters too); nor do peers whose gain
  overstates their work (`PeerOutcome.matched`), whose final score is 0 in such a window;
- missing, early and late submissions count as misses; invalid ones set the final score to 0; a
  peer the fetch never got to (`skipped`) is left as it was;
- a banned peer is rated, final score 0 while `window < ban_until` (ban_windows from its finding);
- a peer absent from the outcomes is inactive (dropped after `inactive_reset_windows`); a uid under
  a new hotkey, or a hotkey under a new uid, starts a fresh record (a held hotkey's ban, pairs stay);
- a banned peer whose uid another hotkey takes is kept *detached* (uid `DETACHED_UID`) until its ban
  ends: dropping it forgot the ban, and the hotkey re-registered on a new uid came back clean.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Final

from openskill.models import PlackettLuce

from scoring.penalties import miss_multiplier, scale_positive
from scoring.proof import positive, proven, with_evidence
from scoring.rating_config import RatingConfig as RatingConfig  # re-exported: the config of this module
from scoring.uniqueness import CopyTier


class Status(StrEnum):
    OK = "ok"
    MISSING = "missing"
    EARLY = "early"
    LATE = "late"
    INVALID = "invalid"
    SKIPPED = "skipped"  # the fetch never reached the peer (not_attempted): nothing is known


_MISSED = frozenset({Status.MISSING, Status.EARLY, Status.LATE})
DETACHED_UID: Final = -1  # a banned hotkey that holds no uid: it is remembered, never ranked or paid
PAIR_EVIDENCE: Final = ("links", "claims", "claim_windows")


@dataclass(frozen=True, slots=True)
class PeerOutcome:
    """What happened to one peer this window. `score`/`indicator` are set iff it was evaluated."""

    hotkey: str
    uid: int
    status: Status
    score: float | None = None
    indicator: int | None = None
    sync: float = 1.0
    copy_tier: CopyTier = CopyTier.NONE
    own_gain: float | None = None  # with score: the relative gain on the peer's own pages
    retention: float | None = None  # with score: its retention ÷ the window's median, when measured
    own_t: float | None = None  # with score: the page test's t (scoring/page_test.py); None: no pages
    matched: bool = True  # with score: False when its gain overstates its work (validator/round/rating.py)

    def __post_init__(self) -> None:
        if (self.score is None) != (self.indicator is None):
            raise ValueError("score and indicator come together")
        if self.score is not None and self.status is not Status.OK:
            raise ValueError("only an ok submission can have a score")
        if self.indicator not in (None, -1, 1) or not 0.0 <= self.sync <= 1.0:
            raise ValueError("indicator must be ±1 and sync in [0, 1]")


@dataclass(frozen=True, slots=True)
class PeerRating:
    hotkey: str
    uid: int
    mu: float
    sigma: float
    bma: float = 0.0
    evaluations: int = 0
    positives: int = 0  # evaluations whose indicator was +1, or whose margin was a tie (proof.py)
    margin_sum: float = 0.0  # Σ clipped relative own-data margins over evaluations
    proof_sum: float = 0.0  # the page test's discounted Σ t, and its variance under no effect
    proof_weight: float = 0.0  # (scoring/page_test.py); 0: no evaluation measured pages
    windows_seen: int = 0
    consecutive_misses: int = 0
    consecutive_negative: int = 0
    inactive_windows: int = 0
    ban_until: int = 0  # banned while window < ban_until
    last_evaluated: int | None = None
    final: float = 0.0  # links: evidence this peer's updates keep resembling others' (scoring/links.py)
    links: Mapping[str, float] = field(default_factory=dict)
    # per partner it was tied with by a copy finding, how far its claim to their update read under
    # the partner's, as a mean over those windows, and how many windows (scoring/claims.py)
    claims: Mapping[str, float] = field(default_factory=dict)
    claim_windows: Mapping[str, int] = field(default_factory=dict)
    # the average of its retention ÷ each window's median (loss_score.py) over `retention_windows`
    # windows (proof.py): what the selection reads, evidence across windows rather than one window's
    retention: float | None = None
    retention_windows: int = 0
    drift: float = 0.0  # evidence it keeps a direction of its own across windows (scoring/persistence.py)
    drift_similarity: float | None = None  # this window's long-lag similarity; None: not measured
    last_aggregated: int | None = None  # the last window that aggregated its update (earnings.py)
    aggregated_mask: int = 0  # bit i: aggregated in window last_aggregated − i (earnings.py `worked`)
    last_matched: int | None = None  # the last window it played the rating match in (`play_match`)
    # its final is 0 by a gate or penalty of its latest evidence (unproven, out of the match, an
    # invalid submission, a ban), not by its ordinal or the BMA: earnings.py pays the one and not the other
    gated: bool = False

    @property
    def ordinal(self) -> float:
        return self.mu - 3.0 * self.sigma

    def banned(self, window: int) -> bool:
        return window < self.ban_until

    @property
    def detached(self) -> bool:
        """A banned hotkey kept after its uid went to another one (`DETACHED_UID`)."""
        return self.uid == DETACHED_UID

    def to_dict(self) -> dict[str, Any]:
        pairs = {k: dict(sorted(getattr(self, k).items())) for k in PAIR_EVIDENCE}
        return dataclasses.asdict(self) | pairs

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> PeerRating:
        fields = dataclasses.fields(PeerRating)
        names = {f.name for f in fields}
        required = {f.name for f in fields if f.default is f.default_factory is dataclasses.MISSING}
        if not required <= set(data) <= names:  # states stored before a field existed take its default
            raise ValueError(f"peer rating fields differ: {sorted(set(data) ^ names)}")
        return PeerRating(**data)


@dataclass(frozen=True, slots=True)
class RatingState:
    """Every known peer's rating, keyed by hotkey, after window `window` (None: nothing yet)."""

    peers: Mapping[str, PeerRating] = field(default_factory=dict)
    window: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"window": self.window, "peers": [self.peers[k].to_dict() for k in sorted(self.peers)]}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> RatingState:
        peers = [PeerRating.from_dict(p) for p in data["peers"]]
        return RatingState({p.hotkey: p for p in peers}, data["window"])


def fresh_rating(hotkey: str, uid: int, cfg: RatingConfig) -> PeerRating:
    return PeerRating(hotkey=hotkey, uid=uid, mu=cfg.mu, sigma=cfg.sigma)


def final_score(peer: PeerRating, sync: float, cfg: RatingConfig) -> float:
    """`max(ordinal, 0) × sync` once the peer has proven its training (proof.py), else 0; also 0 with
    a BMA ≤ 0, or under its threshold after warm-up. A gate, not DESIGN §7's factor: README says why."""
    return 0.0 if gated_out(peer, cfg) else max(peer.ordinal, 0.0) * sync


def gated_out(peer: PeerRating, cfg: RatingConfig) -> bool:
    """Do the gates of `final_score` hold its final at 0, whatever its ordinal?"""
    low = peer.bma <= 0.0 or (peer.evaluations > cfg.bma_warmup and peer.bma < cfg.bma_threshold)
    return low or not proven(peer, cfg)


def update_bma(bma: float, indicator: float, alpha: float) -> float:
    """An exponential average of ±1 per evaluation (`_apply_outcome` passes the proof's tie-aware one)."""
    return (1.0 - alpha) * bma + alpha * indicator


def update_ratings(
    state: RatingState, window: int, outcomes: Sequence[PeerOutcome], cfg: RatingConfig
) -> RatingState:
    """Apply one window: the match, each peer's outcome, penalties and inactivity."""
    if state.window is not None and window <= state.window:
        raise ValueError(f"window {window} does not follow {state.window}")
    hotkeys = [o.hotkey for o in outcomes]
    if len(set(hotkeys)) != len(hotkeys) or len({o.uid for o in outcomes}) != len(outcomes):
        raise ValueError("one outcome per hotkey and per uid")
    known = _known_peers(state.peers, outcomes, cfg)
    rated = play_match(known, outcomes, cfg)
    peers: dict[str, PeerRating] = {}
    for o in sorted(outcomes, key=lambda o: o.hotkey):
        peers[o.hotkey] = _apply_outcome(rated[o.hotkey], o, window, cfg)
    for hotkey, peer in state.peers.items():
        if hotkey in known:
            continue
        if peer.detached or _recycled(peer, outcomes):
            if peer.banned(window):  # the uid went to another hotkey; the ban stays with this one
                peers[hotkey] = replace(fresh_rating(hotkey, DETACHED_UID, cfg), ban_until=peer.ban_until)
            continue
        inactive = _apply_inactivity(peer, window, cfg)
        if inactive is not None:
            peers[hotkey] = inactive
    return RatingState(dict(sorted(peers.items())), window)


def play_match(
    peers: Mapping[str, PeerRating], outcomes: Sequence[PeerOutcome], cfg: RatingConfig
) -> dict[str, PeerRating]:
    """One Plackett-Luce match over the evaluated peers only, those `matched`. Absent and invalid peers
    are penalised on their own (`_apply_outcome`): as opponents they would hand every evaluated peer a
    free win; an unmatched peer's gain overstates its work, and its wins would lower honest μ."""
    entrants = sorted((o.hotkey, o.score) for o in outcomes if o.score is not None and o.matched)
    out = dict(peers)
    if len(entrants) < 2:
        return out
    model = PlackettLuce(mu=cfg.mu, sigma=cfg.sigma, beta=cfg.beta, tau=cfg.tau)
    teams = [[model.rating(mu=peers[h].mu, sigma=peers[h].sigma)] for h, _ in entrants]
    result = model.rate(teams, scores=[s for _, s in entrants])
    for (hotkey, _), team in zip(entrants, result, strict=True):
        out[hotkey] = replace(peers[hotkey], mu=float(team[0].mu), sigma=float(team[0].sigma))
    return out


def _known_peers(
    peers: Mapping[str, PeerRating], outcomes: Sequence[PeerOutcome], cfg: RatingConfig
) -> dict[str, PeerRating]:
    """The rating each outcome's peer starts the window with (fresh when new or re-registered)."""
    known: dict[str, PeerRating] = {}
    for o in outcomes:
        old = peers.get(o.hotkey)
        if old is not None and old.uid == o.uid:
            known[o.hotkey] = old
        elif old is None:
            known[o.hotkey] = fresh_rating(o.hotkey, o.uid, cfg)
        else:  # re-registered under another uid: a new peer; its ban and pairs stick to the hotkey
            known[o.hotkey] = replace(_wiped(old, cfg, "ban_until"), uid=o.uid)
    return known


def _recycled(peer: PeerRating, outcomes: Sequence[PeerOutcome]) -> bool:
    """The peer's uid now belongs to another hotkey: the old peer is gone."""
    return any(o.uid == peer.uid and o.hotkey != peer.hotkey for o in outcomes)


def _apply_outcome(peer: PeerRating, o: PeerOutcome, window: int, cfg: RatingConfig) -> PeerRating:
    peer = replace(peer, windows_seen=peer.windows_seen + 1, inactive_windows=0)
    if o.status is Status.SKIPPED:  # nothing is known about it this window
        return peer
    if o.score is not None and o.indicator is not None:
        peer = replace(
            with_evidence(peer, o, cfg),
            bma=update_bma(peer.bma, 1 if positive(o, cfg) else -1, cfg.bma_alpha),
            last_evaluated=window,
            last_matched=window if o.matched else peer.last_matched,
            consecutive_misses=0,
            consecutive_negative=peer.consecutive_negative + 1 if o.score < 0 else 0,
        )
        # the BMA holds the final at 0 (final_score) but gates nothing else: such a peer is proven
        # and matched, and when the selection aggregates it, earnings.py pays it as it pays an
        # ordinal ≤ 0 (it was paid nothing for an update the model used: a red-team run)
        gated = not o.matched or not proven(peer, cfg)
        peer = replace(peer, final=0.0 if gated else final_score(peer, o.sync, cfg), gated=gated)
    elif o.status in _MISSED:
        misses = peer.consecutive_misses + 1
        factor = miss_multiplier(misses, cfg.penalties)
        peer = replace(peer, consecutive_misses=misses, final=scale_positive(peer.final, factor))
    elif o.status is Status.INVALID:
        peer = replace(peer, consecutive_misses=0, final=0.0, gated=True)
    else:  # valid, not sampled for evaluation this window
        peer = replace(peer, consecutive_misses=0)
    peer = _apply_copy(peer, o.copy_tier, window, cfg)
    return replace(peer, final=0.0, gated=True) if peer.banned(window) else peer


def _apply_copy(peer: PeerRating, tier: CopyTier, window: int, cfg: RatingConfig) -> PeerRating:
    if tier is CopyTier.HALVE:
        return replace(peer, final=scale_positive(peer.final, cfg.penalties.copy_multiplier))
    if tier is CopyTier.NONE:
        return peer
    # the record, not the history (`_wiped`): last_evaluated stays, or the draw serves it as new (sampling.py)
    reset = _wiped(peer, cfg, "windows_seen", "ban_until", "last_evaluated")
    if tier is CopyTier.BAN:
        reset = replace(reset, ban_until=max(peer.ban_until, window + cfg.penalties.ban_windows))
    return reset


def _apply_inactivity(peer: PeerRating, window: int, cfg: RatingConfig) -> PeerRating | None:
    inactive = peer.inactive_windows + 1
    if inactive < cfg.penalties.inactive_reset_windows:
        final = scale_positive(peer.final, cfg.penalties.inactive_multiplier)
        return replace(peer, inactive_windows=inactive, final=final)
    if not peer.banned(window):
        return None
    return _wiped(peer, cfg, "ban_until")  # a banned peer's record: going quiet must not shorten its ban


def _wiped(peer: PeerRating, cfg: RatingConfig, *kept: str) -> PeerRating:
    """A fresh record keeping `kept`, links and claims: wiped, a copier's next tie read one window's."""
    fields = {k: getattr(peer, k) for k in (*kept, *PAIR_EVIDENCE)}
    return replace(fresh_rating(peer.hotkey, peer.uid, cfg), **fields)
