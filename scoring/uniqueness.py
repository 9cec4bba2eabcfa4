"""Uniqueness: exact duplicate payloads and copied updates across a window's peers (DESIGN.md §5.7).

Overlap of peers a and b is defined over *kept positions*: a position is a (flat coordinate, value
sign) pair, sign meaning `value > 0`. With K_a, K_b the kept counts (equal for valid peers, since the
schema fixes min(topk, chunk length) per chunk),

    overlap(a, b) = |{positions kept by both with the same sign}| / min(K_a, K_b).

Two independent random top-64-of-4096 selections share ~1/64 ≈ 1.6 % of coordinates, half of those
with the same sign: ≈ 0.8 %. Comparing every pair exactly is O(P² · K), far too slow, so a seeded
sample of whole chunks (the same for every peer) gives each peer a small set of positions, hashed
into a ±1 count sketch: one (P, D) × (D, P) matmul estimates every pair's shared positions at once
(unbiased), and the tiers read that estimate. Only the finding an offender is rejected for is
measured exactly (a crowd of sybils flagging each other made exact walks quadratic). Small
parameters (a chunk shorter than topk keeps every position) raise every pair's overlap a little;
exact duplicate payloads (equal digests) are reported with overlap 1 and the top tier.

Calibration. Honest updates from the same base share many positions early in training (at one
inner step honest pairs overlap ≈ 0.74; at twenty ≈ 0.18 from a random init), so a fixed overlap
threshold flags honest peers. The tiers apply to a *copy strength*: the larger of
- the overlap's excess over the window's typical pair, `(o − m) / (1 − m)`, m the median (`calibrate`);
- the residual similarity of `scoring/similarity.py`, ≤ 0.07 for honest pairs in every window
  measured (even with half the window junk), ≥ 0.13 for noisy copies, blends and colluders;
  a pair below `similarity_floor` is never flagged by positions alone.
Each flagged pair is reported with its overlap, similarity and baseline. A group that sent one
update (equal payloads, or the same positions with jittered values: scoring/same_update.py) takes
part once, through its first upload: in numbers it set the median pair and the consensus. Once
`MIN_PROVEN` compared peers have proven their training, the median pair and the consensus are
theirs alone (`_unproven`): identities are free, and a crowd of copies each re-compressed with
noise of its own is not one update. A pair of a proven and an unproven peer is read as two proven
peers are (scoring/similarity.py `mixed_pairs`): read plainly, honest pairs across the split read
+0.19 over the same pairs proven, and full honest peers in their warm-up were flagged.

Direction. The offender is the later uploader, judged by the validator's own observation: a peer's
upload lies in `(timestamp − resolution, timestamp]`; a is clearly first when `t_a <= t_b − res_b`
and `t_a < t_b` (equal times tie).
When neither is clearly first the finding is *unclear*: nobody is penalised, and the selection
aggregates only one of the two (an identical or near-identical payload never counts twice).

The seed should be unpredictable to peers (the window's secret seed): copiers cannot dodge the sample.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from scoring.authorship import Readings
from scoring.copy_config import CopyTier as CopyTier  # re-exported: this module's types
from scoring.copy_config import UniquenessConfig as UniquenessConfig
from scoring.copy_findings import CopyFinding as CopyFinding  # re-exported: this module's types
from scoring.copy_findings import PeerPayload as PeerPayload
from scoring.copy_findings import Watched, duplicate_findings, oriented, tie_same_updates, unclear
from scoring.similarity import estimate_overlaps, exact_overlap, residual_similarity, sample_blocks, sampled
from scoring.types import Reason

I64 = npt.NDArray[np.int64]
MIN_PROVEN = 3  # compared proven peers from which the baseline and consensus are theirs alone


@dataclass(frozen=True, slots=True)
class CopyCheck:
    """A window's copy findings, plus what the links across windows need: the compared peers and
    the pairs whose residual similarity reached `resemblance_floor` (hotkeys sorted in each pair)."""

    findings: list[CopyFinding]
    compared: tuple[str, ...] = ()
    resemblances: Mapping[tuple[str, str], float] = field(default_factory=dict)
    first: Mapping[tuple[str, str], str] = field(default_factory=dict)  # who clearly uploaded first
    # each peer's upload as the validator saw it (math.inf: never seen, its time is its store's own)
    seen: Mapping[str, float] = field(default_factory=dict)
    # after the evaluation: flagged pairs' updates read on each other's pages (scoring/authorship.py)
    readings: Readings = field(default_factory=dict)
    # the unflagged pairs whose residuals are closest, most similar first: read on each other's
    # pages when the window's readings leave room (scoring/copy_findings.py `Watched`)
    watched: tuple[Watched, ...] = ()


def find_copies(
    peers: Sequence[PeerPayload], cfg: UniquenessConfig = UniquenessConfig(), seed: int = 0
) -> list[CopyFinding]:
    """All duplicate-payload and copy findings of a window, sorted by (offender, other)."""
    return examine_copies(peers, cfg, seed).findings


def examine_copies(
    peers: Sequence[PeerPayload], cfg: UniquenessConfig = UniquenessConfig(), seed: int = 0
) -> CopyCheck:
    """`find_copies`, with the window's resemblances and sightings (CopyCheck)."""
    seen = {p.hotkey: p.timestamp if math.isfinite(p.resolution) else math.inf for p in peers}
    return replace(_examine(peers, cfg, seed), seen=dict(sorted(seen.items())))


def _examine(peers: Sequence[PeerPayload], cfg: UniquenessConfig, seed: int) -> CopyCheck:
    findings = duplicate_findings(peers, cfg)
    dup_pairs = {frozenset((f.offender, f.other)) for f in findings}
    # a pair alone is its own baseline and its own consensus: nothing to calibrate against, so only
    # exact duplicates are evidence (raw overlap flagged two honest peers alone, issue 12)
    uncalibrated = len(peers) < 3
    rng = np.random.default_rng(seed)
    blocks = sample_blocks(peers[0].update, cfg, rng) if len(peers) >= 2 else []
    if not blocks or (uncalibrated and cfg.calibrate):
        return _unmeasured(sorted(findings, key=lambda f: (f.offender, f.other)), peers)
    idx, val = sampled([p.update for p in peers], blocks)
    estimates = estimate_overlaps(idx, val, cfg.sketch_bits, rng)
    if uncalibrated:  # asked for raw tiers (calibrate=False): the overlap alone decides
        return _unmeasured(
            _flagged(peers, cfg, findings, dup_pairs, estimates, np.zeros_like(estimates)), peers
        )
    # each group that sent one update takes part in the calibration once, through its first upload
    heads = tie_same_updates(peers, cfg, estimates, findings, dup_pairs)
    if len(heads) < 3:  # one update sent by most of the window: nothing else to calibrate against
        found = _measured(sorted(findings, key=lambda f: (f.offender, f.other)), peers, cfg)
        return _unmeasured(found, [peers[i] for i in heads])
    judged = [peers[i] for i in heads]
    idx, val, estimates = idx[heads], val[heads], estimates[np.ix_(heads, heads)]
    unproven = _unproven(judged)
    similarity = residual_similarity(idx, val, cfg.sketch_bits, rng, unproven)
    flagged = _flagged(judged, cfg, findings, dup_pairs, estimates, similarity)
    flagged = _measured(flagged, peers, cfg) if cfg.calibrate else flagged
    peers = judged
    # links are measured among the peers not caught copying: copies of one victim in the consensus
    # tilt every other peer's residual the same way (honest pairs then linked at +0.07 … +0.09).
    # Peers already linked stay compared but leave the consensus: colluders' shared direction in it
    # tilted honest residuals alike (an honest pair linked in the mixed run's eighth window; in exact
    # diagnostics honest pairs' highest similarity fell from +0.038 to +0.015 without them)
    caught = offences(flagged)
    rows = [i for i, p in enumerate(peers) if p.hotkey not in caught]
    outside = np.array([peers[i].linked for i in rows], dtype=np.bool_)
    if unproven is not None:
        outside |= unproven[rows]
    if len(rows) - int(outside.sum()) < 3:
        # Too few to measure a consensus: no resemblance is seen, so the links among the compared
        # fade as in a window that measured none. They froze: a blender's links to its two authors
        # held after it went back to honest work, and when its own pages gained most the star kept it
        # and left both honest authors out (a demo run, windows 10-11). Read against a consensus of
        # two, honest pairs outside it resembled each other (+0.065 a window there): nothing is read.
        return CopyCheck(flagged, tuple(sorted(peers[i].hotkey for i in rows)))
    if len(rows) < len(peers) or outside.any():
        peers, estimates, similarity = (
            [peers[i] for i in rows],
            estimates[np.ix_(rows, rows)],
            residual_similarity(idx[rows], val[rows], cfg.sketch_bits, rng, outside, pairs_as_inside=True),
        )
    resembling: dict[tuple[str, str], float] = {}
    first: dict[tuple[str, str], str] = {}
    for i, j in zip(*np.nonzero(np.triu(similarity >= cfg.resemblance_floor, k=1)), strict=True):
        pa, pb = sorted((peers[int(i)], peers[int(j)]), key=lambda p: p.hotkey)
        resembling[(pa.hotkey, pb.hotkey)] = float(similarity[i, j])
        if pa.clearly_before(pb) or pb.clearly_before(pa):
            first[(pa.hotkey, pb.hotkey)] = pa.hotkey if pa.clearly_before(pb) else pb.hotkey
    keys = tuple(sorted(p.hotkey for p in peers))
    watched = _closest(peers, similarity, estimates, flagged, cfg.watch)
    return CopyCheck(
        flagged, keys, dict(sorted(resembling.items())), dict(sorted(first.items())), watched=watched
    )


def _closest(
    peers: Sequence[PeerPayload],
    similarity: npt.NDArray[np.float64],
    estimates: npt.NDArray[np.float64],
    flagged: Sequence[CopyFinding],
    n: int,
) -> tuple[Watched, ...]:
    """The `n` pairs of `peers` (compared, not caught) with the highest residual similarity that no
    finding names and that sent different payloads. A copy re-compressed with dense noise at its own
    RMS moved enough top-k positions to overlap its victim as honest pairs do, and its residual
    similarity read under the floor, yet above every honest pair of its window (−0.04 … −0.06
    against −0.10 … −0.15, `frontrun_noisy`): the closest pair is where a copy that dodged the
    tiers is (scoring/copy_findings.py `held_findings` says what its readings decide)."""
    named = {frozenset((f.offender, f.other)) for f in flagged}
    rows, cols = np.triu_indices(len(peers), k=1)
    out: list[Watched] = []
    for k in np.argsort(-similarity[rows, cols], kind="stable"):  # most similar first
        if len(out) >= n:
            break
        i, j = int(rows[k]), int(cols[k])
        a, b = peers[i], peers[j]
        if a.digest != b.digest and frozenset((a.hotkey, b.hotkey)) not in named:
            first, second = sorted((a.hotkey, b.hotkey))
            out.append(Watched(first, second, float(similarity[i, j]), float(estimates[i, j])))
    return tuple(out)


def _unmeasured(findings: list[CopyFinding], peers: Sequence[PeerPayload]) -> CopyCheck:
    """A window whose check measures no resemblance (fewer than three peers or distinct updates, or
    nothing to sample): `peers` not caught are compared, so the links among them fade as in any
    window where they resemble nothing. They froze there, as they did with a consensus of fewer
    than three (below): an honest peer tied to a partner stayed left out beside it."""
    caught = offences(findings)
    return CopyCheck(findings, tuple(sorted(p.hotkey for p in peers if p.hotkey not in caught)))


def _flagged(
    peers: Sequence[PeerPayload],
    cfg: UniquenessConfig,
    findings: list[CopyFinding],
    dup_pairs: set[frozenset[str]],
    estimates: npt.NDArray[np.float64],
    similarity: npt.NDArray[np.float64],
) -> list[CopyFinding]:
    """The duplicate `findings` plus every pair whose copy strength reaches a tier, sorted."""
    calibrated = cfg.calibrate and len(peers) >= 3
    baseline = _typical_overlap(estimates, _unproven(peers)) if calibrated else 0.0
    margin = cfg.candidate_margin
    pick = (_excess(estimates, baseline) >= cfg.halve_at - margin) | (similarity >= cfg.halve_at - margin / 2)
    for i, j in zip(*np.nonzero(np.triu(pick, k=1)), strict=True):
        a, b = peers[int(i)], peers[int(j)]
        if a.digest == b.digest or frozenset((a.hotkey, b.hotkey)) in dup_pairs:
            continue
        # calibrated, the tier reads the sample alone (below): the exact overlap, a walk over both
        # whole updates, is measured only for what a peer is rejected for (`_measured`)
        overlap = float(estimates[i, j]) if calibrated else exact_overlap(a.update, b.update, cfg)
        sim = float(similarity[i, j])
        # the excess compares the pair's estimate with the baseline from the same sample: what the
        # sample over- or under-represents cancels
        excess = float(_excess(estimates[i, j], baseline)) if calibrated else overlap
        # a copy keeps its victim's residual; honest pairs that merely share positions do not: positions
        # alone never flag a pair without a shared residual (honest pairs measured ≤ 0.07, copies ≥ 0.13)
        shared = sim >= cfg.similarity_floor or not calibrated
        tier = cfg.tier(max(excess, sim)) if shared else CopyTier.NONE
        if tier is not CopyTier.NONE:
            found = CopyFinding(b.hotkey, a.hotkey, overlap, tier, Reason.COPY, sim, baseline)
            findings.append(oriented(a, b, found))
    ordered = sorted(findings, key=lambda f: (f.offender, f.other))
    return ordered


def _measured(
    found: list[CopyFinding], peers: Sequence[PeerPayload], cfg: UniquenessConfig
) -> list[CopyFinding]:
    """`found` with the exact overlap of the copy finding each offender is rejected for. Measuring
    every flagged pair was quadratic: sybils sending one update with jittered values flagged every
    pair among them, each a walk over two whole updates (~1,000 s for 128 sybils at 100M values)."""
    update = {p.hotkey: p.update for p in peers}
    # a same-update tie that penalises is exact already (scoring/copy_findings.py)
    decisive = {id(f) for f in offences(found).values() if f.reason == Reason.COPY and not f.same_update}
    return [
        replace(f, overlap=exact_overlap(update[f.offender], update[f.other], cfg))
        if id(f) in decisive
        else f
        for f in found
    ]


def _unproven(peers: Sequence[PeerPayload]) -> npt.NDArray[np.bool_] | None:
    """The peers left out of the window's baseline and consensus: those that have not proven their
    training, once at least `MIN_PROVEN` compared peers have (else None: everyone counts). New
    identities are free: ten re-compressed noisy copies of one victim beside five honest peers set
    the median pair (0.50) and the consensus, no copy was flagged, and two honest peers were named
    each other's copies (residual similarity 0.16 against a crowd-tilted consensus)."""
    out = np.array([not p.proven for p in peers], dtype=np.bool_)
    return out if len(peers) - int(out.sum()) >= MIN_PROVEN else None


def _typical_overlap(
    estimates: npt.NDArray[np.float64], unproven: npt.NDArray[np.bool_] | None = None
) -> float:
    """The median overlap over all pairs (of proven peers, when `unproven` is given): what honest
    peers share at this stage of training."""
    if unproven is not None:
        keep = np.flatnonzero(~unproven)
        estimates = estimates[np.ix_(keep, keep)]
    upper = estimates[np.triu_indices(estimates.shape[0], k=1)]
    return float(np.clip(np.median(upper), 0.0, 0.99))


def _excess(overlap: npt.NDArray[np.float64] | np.float64, baseline: float) -> npt.NDArray[np.float64]:
    return np.asarray((overlap - baseline) / (1.0 - baseline), dtype=np.float64)


def offences(findings: Sequence[CopyFinding]) -> dict[str, CopyFinding]:
    """Each offender's most severe finding (of equals, the first in `findings`): what the round
    rejects it for. An unclear finding has no offender."""
    worst: dict[str, CopyFinding] = {}
    for f in findings:
        if f.clear and (f.offender not in worst or f.tier > worst[f.offender].tier):
            worst[f.offender] = f
    return worst


def unconvicted(copies: CopyCheck) -> CopyCheck:
    """Every finding unclear: nobody penalised (a window whose conviction step failed)."""
    return replace(copies, findings=[f if not f.clear else unclear(f) for f in copies.findings])


def unclear_pairs(findings: Sequence[CopyFinding]) -> list[tuple[str, str]]:
    """Pairs whose upload order was unclear: only one of each may be aggregated."""
    return [(f.other, f.offender) for f in findings if not f.clear]
