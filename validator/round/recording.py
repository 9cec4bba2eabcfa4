"""The window as storage records, committed in one transaction."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime

from scoring.authorship import NO_READINGS, Readings
from scoring.clipping import inflation
from scoring.loss_score import PeerEval
from scoring.penalties import miss_multiplier
from scoring.ranking import PeerRating, RatingConfig, RatingState, Status
from scoring.selection import Selection
from scoring.uniqueness import CopyFinding, CopyTier, offences
from storage.records import (
    CopyPairRecord,
    EvaluationRecord,
    PenaltyRecord,
    RatingRecord,
    SelectionRecord,
    SubmissionRecord,
    WindowRecord,
)
from storage.sketch_rows import SketchRecord
from validator.round.outcomes import PeerWindow, Scored, judging_failed
from validator.stores.fetch_types import plausible_time
from validator.stores.objstore import object_key


def _time(ts: float | None) -> datetime | None:
    """A stored timestamp; one outside the years any real clock reads (a store may report any
    Last-Modified) is None."""
    return None if (ts := plausible_time(ts)) is None else datetime.fromtimestamp(ts, UTC)


def submission_record(
    p: PeerWindow, key: str | None, reference: Mapping[str, float] | None = None
) -> SubmissionRecord:
    f = p.fetch
    norms = p.update.norms() if p.valid and p.update is not None else None
    return SubmissionRecord(
        hotkey=p.hotkey,
        uid=p.uid,
        status=p.status,
        reason=p.reason,
        detail=p.detail[:500],
        object_key=key if f is not None else None,
        etag=f.etag if f is not None else None,
        version_id=f.version if f is not None else None,
        size=f.size if f is not None else None,
        payload_digest=p.update.digest if p.update is not None else None,
        content_digest=p.content_digest,
        decoded_digest=p.update.decoded if p.update is not None else None,
        storage_time=_time(f.last_modified) if f is not None else None,
        fetched_time=_time(f.fetched_at) if f is not None and f.fetched_at else None,
        first_seen=f.first_seen if f is not None else None,
        seen_resolution_s=_finite(f.seen_resolution_s) if f is not None else None,
        norm=math.sqrt(sum(n * n for n in norms.values())) if norms is not None else None,
        inflation=inflation(norms, reference) if norms is not None and reference else None,
    )


def _finite(seconds: float | None) -> float | None:
    """An unbounded resolution, or a non-finite loss, is stored as NULL (JSON has no NaN or infinity)."""
    return seconds if seconds is not None and math.isfinite(seconds) else None


def evaluation_record(hotkey: str, e: PeerEval) -> EvaluationRecord:
    # per-page losses as JSON lists: a non-finite one as null (JSON has no NaN, and Postgres refuses
    # the token, which would fail the window's commit)
    pages = None if e.pages is None else {k: [_finite(v) for v in vs] for k, vs in asdict(e.pages).items()}
    return EvaluationRecord.of(hotkey, e, asdict(e.timings), pages)


def fetched_key(window: int, p: PeerWindow) -> str | None:
    """The object key of what was fetched; None when nothing was (a hotkey that names no object key
    is a `bad_location` peer, never fetched)."""
    return object_key(window, p.hotkey) if p.fetch is not None else None


def recordable(peers: Sequence[PeerWindow], window: int) -> list[PeerWindow]:
    """Each peer's rows built once before the window is rated: a peer whose rows cannot be built is
    `internal_error` (recorded without its fetch details), so one odd value cannot fail the commit."""
    out = []
    for p in peers:
        try:
            submission_record(p, fetched_key(window, p))
            if p.evaluation is not None:
                evaluation_record(p.hotkey, p.evaluation)
        except Exception as e:  # one peer's record: isolated
            out.append(replace(judging_failed(p, "record", e), fetch=None, evaluation=None))
            continue
        out.append(p)
    return out


def rating_record(rating: PeerRating) -> RatingRecord:
    return RatingRecord(
        hotkey=rating.hotkey,
        uid=rating.uid,
        mu=rating.mu,
        sigma=rating.sigma,
        bma=rating.bma,
        final_score=rating.final,
        penalty={
            "consecutive_misses": rating.consecutive_misses,
            "consecutive_negative": rating.consecutive_negative,
            "inactive_windows": rating.inactive_windows,
            "ban_until": rating.ban_until,
        },
        last_evaluated_window=rating.last_evaluated,
        state=rating.to_dict(),
    )


def penalty_records(
    peers: Sequence[PeerWindow], state: RatingState, cfg: RatingConfig
) -> list[PenaltyRecord]:
    out = []
    for p in peers:
        rating = state.peers.get(p.hotkey)
        if p.status in (Status.MISSING, Status.EARLY, Status.LATE) and rating is not None:
            mult = miss_multiplier(max(rating.consecutive_misses, 1), cfg.penalties)
            out.append(
                PenaltyRecord(p.hotkey, "missing", mult, f"{p.status} ({rating.consecutive_misses} in a row)")
            )
        elif p.status == Status.INVALID:
            kind = "copy" if p.copy_tier is not CopyTier.NONE else "invalid"
            until = rating.ban_until if rating is not None and p.copy_tier is CopyTier.BAN else None
            out.append(PenaltyRecord(p.hotkey, kind, 0.0, f"{p.reason}: {p.detail}"[:300], until))
    return out


PAIRS_PER_PEER = 3  # flagged pairs recorded per peer: its strongest, which decide what it is judged for


def copy_pair_records(
    findings: Sequence[CopyFinding],
    readings: Readings = NO_READINGS,
    per_peer: int = PAIRS_PER_PEER,
) -> list[CopyPairRecord]:
    """Each peer's `per_peer` strongest flagged pairs (clear order, tier, similarity, overlap
    first). All of them were recorded: a crowd of g groups of jittered copies from stores the polls
    cannot see flags n²/2g pairs, nobody penalised, and 256 identities in 2 groups wrote 15,252 rows,
    7 MB, every window. The findings themselves, which the selection reads, are all kept."""
    # what each offender is rejected for is always shown, and every pair whose updates were read on
    # each other's pages: replay reads exactly the readings stored here (validator/round/cross.py)
    decisive = {id(f) for f in offences(findings).values()}
    decisive |= {id(f) for f in findings if (f.offender, f.other) in readings}

    def strength(f: CopyFinding) -> tuple[bool, bool, int, float, float, str, str]:
        return id(f) not in decisive, not f.clear, -f.tier, -f.similarity, -f.overlap, f.offender, f.other

    strongest = sorted(findings, key=strength)
    pairs: dict[tuple[str, str], CopyPairRecord] = {}
    shown: Counter[str] = Counter()
    for f in strongest:
        a, b = sorted((f.offender, f.other))
        if (a, b) in pairs or (id(f) not in decisive and shown[a] >= per_peer and shown[b] >= per_peer):
            continue
        shown.update((a, b))
        # overlap already counts only shared positions whose signs agree (scoring/uniqueness.py),
        # so the pair's sign agreement is 1 by construction
        pairs[(a, b)] = CopyPairRecord(
            a, b, f.overlap, 1.0, f.offender, similarity=f.similarity, baseline=f.baseline, clear=f.clear,
            authorship_a=readings.get((a, b)), authorship_b=readings.get((b, a)),
        )  # fmt: skip
    return sorted(pairs.values(), key=lambda c: (c.hotkey_a, c.hotkey_b))


def selection_records(selection: Selection[str], uids: Mapping[str, int]) -> list[SelectionRecord]:
    gather = [SelectionRecord(h, uids[h], "gather", i) for i, h in enumerate(selection.gather)]
    reserve = [SelectionRecord(h, uids[h], "reserve", i) for i, h in enumerate(selection.reserve)]
    return gather + reserve


def window_record(
    header: WindowRecord, scored: Scored, aggregate_digests: Sequence[str], cfg: RatingConfig
) -> WindowRecord:
    """The header's window with everything the round decided in it."""
    peers, state = scored.peers, scored.ratings
    uids = {p.hotkey: p.uid for p in peers}
    return replace(
        header,
        submissions=[submission_record(p, fetched_key(header.window, p), scored.reference) for p in peers],
        evaluations=[evaluation_record(p.hotkey, p.evaluation) for p in peers if p.evaluation is not None],
        ratings=[rating_record(rating) for rating in state.peers.values()],
        penalties=penalty_records(peers, state, cfg),
        copy_pairs=copy_pair_records(scored.findings, scored.readings),
        selections=selection_records(scored.selection, uids),
        aggregate_digests=list(aggregate_digests),
        clip_reference=dict(scored.reference),
        aggregate_weights=list(scored.selection.weights),
        sketches=[SketchRecord(h, scored.sketch_seed, r) for h, r in sorted(scored.residuals.items())],
    )
