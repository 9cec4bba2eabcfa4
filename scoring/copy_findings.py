"""A window's copy findings as values, and the groups that sent one update (scoring/uniqueness.py
judges the rest): equal payloads, and the same kept positions with jittered values
(scoring/same_update.py), each group tied to its first upload the validator saw."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from scoring.authorship import NO_READINGS, Readings, claim_gap, crowd_lead
from scoring.copy_config import CopyTier, UniquenessConfig
from scoring.same_update import same_update_groups
from scoring.similarity import exact_overlap
from scoring.twins import OWNERSHIP_MARGIN, owners
from scoring.types import Reason, SparseParam


@dataclass(frozen=True, slots=True)
class PeerPayload:
    """One peer's valid submission as uniqueness sees it."""

    hotkey: str
    digest: str
    timestamp: float  # the validator's first sight of the object, seconds
    update: Mapping[str, SparseParam]
    resolution: float = 0.0  # the upload lies in (timestamp - resolution, timestamp]
    linked: bool = False  # already linked to another peer (scoring/links.py): outside the links' consensus
    # proven its training before this window (scoring/proof.py): once three are compared, the
    # window's baseline and consensus are theirs (scoring/uniqueness.py)
    proven: bool = False

    def clearly_before(self, other: PeerPayload) -> bool:
        # Both times must be the validator's own sightings: an unsighted peer's timestamp is its
        # store's Last-Modified, which it controls, so it bounds nothing (a thief could backdate it).
        if not (math.isfinite(self.resolution) and math.isfinite(other.resolution)):
            return False
        return self.timestamp < other.timestamp and self.timestamp <= other.timestamp - other.resolution


@dataclass(frozen=True, slots=True)
class CopyFinding:
    """`offender` uploaded after `other` and overlaps it by `overlap`. When the order is unclear
    (`clear` False) `offender` is just the larger hotkey: nobody is penalised for the pair. The
    overlap is exact for the finding an offender is rejected for (and for every pair of a window
    too small to calibrate); of the other flagged pairs it is the sampled chunks' estimate."""

    offender: str
    other: str
    overlap: float
    tier: CopyTier
    reason: str
    similarity: float = 1.0  # residual similarity (scoring/similarity.py)
    baseline: float = 0.0  # the window's typical overlap the excess is measured from
    clear: bool = True
    same_update: bool = False  # jittered values on the same positions: one update (scoring/same_update.py)


def oriented(a: PeerPayload, b: PeerPayload, finding: CopyFinding) -> CopyFinding:
    """`finding` for the pair (a, b), which names b the offender, turned to name the later uploader;
    when neither is clearly first, the finding is unclear. The order names a *suspect* only when
    the first uploader has proven its training and the later one has not, and the suspect is
    penalised only once its own pages confirm it (`convict`): every input of an honest update is
    public (the base, the peer's assigned pages, the recipe, its error feedback replayed from its
    first window), so an identity can compute another peer's update and publish it first. An
    unproven one had a proven victim rejected and banned in every window (a red-team run); begun in
    the victim's warm-up (`frontrun`, validator/demo/sim/adversaries.py) it kept the victim
    unevaluated, so never proven; one that proved training of its own first framed a proven victim
    (`frontrun_proven`) and, by the order alone, a newcomer in its warm-up (`frontrun_newcomer`:
    banned for 20 windows after its first upload). Any other pair is unclear: both sides are
    evaluated, and whose assigned pages the update was trained on decides which of them may be
    aggregated (scoring/twins.py `owners`)."""
    if a.clearly_before(b) and _decides(a, b):
        return replace(finding, offender=b.hotkey, other=a.hotkey)
    if b.clearly_before(a) and _decides(b, a):
        return replace(finding, offender=a.hotkey, other=b.hotkey)
    return unclear(finding)


def unclear(finding: CopyFinding) -> CopyFinding:
    """The finding with nobody named: `offender` is just the larger hotkey."""
    first, second = sorted((finding.offender, finding.other))
    return replace(finding, offender=second, other=first, clear=False)


# How far (page-test t, scoring/page_test.py) a suspect's own pages must read under the first
# uploader's for the order to penalise it. Pages an update never saw read t ~ N(0, 1); its author's
# 2.3 ± 1.4 a window for a full honest peer and 0.84 ± 1.19 for a ⅒-steps one (scoring/twins.py).
# Modelled as normal, at 2.0 a newcomer whose update a proven peer published first is penalised in
# about 0.6 % (full) and 3.4 % (⅒ steps) of such windows, and an unproven copier of a full honest
# peer in about 57 % of the windows it copies (at 1.0: 2.7 %, 12 % and 78 %). A penalty is a reset
# or a 20-window ban, so it asks for more than leaving a sender out of one window's aggregate does.
CONVICTION_MARGIN = 2.0


def convict(
    findings: Sequence[CopyFinding],
    page_t: Mapping[str, float],
    readings: Readings = NO_READINGS,
    margin: float = CONVICTION_MARGIN,
) -> list[CopyFinding]:
    """`findings` after the window's evaluation: a clear finding stays clear (its offender is
    penalised) only when both sides were evaluated and the suspect's claim to the update reads at
    least `margin` under the first uploader's (scoring/authorship.py `claim_gap`: for one payload,
    their own page tests; else those and the readings of each update on the other's pages, both),
    plus what the best of that many first uploaders reads by chance alone (`crowd_lead`, over the
    suspect's clear findings with both sides evaluated); any other becomes unclear, and the
    selection aggregates at most one of the two (scoring/twins.py). A suspect not evaluated is not
    penalised: unproven, it is not aggregated either.

    The lead: each first uploader's pages read the update at t ~ N(0, 1), and the suspect is
    penalised when any one of them reads `margin` over its own. Modelled as `CONVICTION_MARGIN`
    is, a ⅒-steps newcomer whose update nine proven identities publish first (each a little
    perturbed, so that each is a finding of its own and the readings, of nearly one update, read
    as the own tests do) was banned in 15 % of those windows, a full one in 3.4 %; with the lead
    1.6 % and 0.3 %, under one frontrunner's 3.4 % and 0.6 % (`tests/test_ownership.py`)."""
    gaps = [claim_gap(f.offender, f.other, page_t, readings) if f.clear else None for f in findings]
    tests = Counter(f.offender for f, gap in zip(findings, gaps, strict=True) if gap is not None)
    out = []
    for f, gap in zip(findings, gaps, strict=True):
        confirmed = gap is not None and gap >= margin + crowd_lead(tests[f.offender])
        out.append(f if not f.clear or confirmed else unclear(f))
    return out


@dataclass(frozen=True, slots=True)
class Watched:
    """A pair no finding names whose residuals were among the window's closest, hotkeys sorted
    (scoring/uniqueness.py `_closest`): its updates are read on each other's pages when the
    window's readings leave room (validator/round/cross.py)."""

    a: str
    b: str
    similarity: float
    overlap: float  # the sampled chunks' estimate


# How near a sender's update must read on another peer's pages to that peer's own update (page-test
# t) to hold its training. An honest update on another honest peer's pages reads the part every
# update gains there; the peer's own update reads that plus its training: 0.63 … 3.28 t more (mean
# 1.8) over the closest honest pair of each window of `bench_fidelity`'s `honest_only` (seed 0,
# docs/fidelity-log.md). One update sent twice reads near on both sides; the noisy frontrunner's
# pair read −0.03 and −0.22 in the window it was held.
HOLD_SLACK = 0.5


def held_findings(
    watched: Sequence[Watched],
    findings: Sequence[CopyFinding],
    page_t: Mapping[str, float],
    readings: Readings,
    slack: float = HOLD_SLACK,
) -> list[CopyFinding]:
    """The watched pairs whose readings say that one sender's update holds the other's training and
    nothing of its own: each update reads on the other's pages within `slack` of the other's own
    update (one update, sent twice), and the holder's claim reads at least `OWNERSHIP_MARGIN` under
    the other's (`claim_gap`: the own tests and the readings agree on the author). Each becomes an
    unclear finding (nobody is penalised) when, beside the window's other unclear findings,
    scoring/twins.py `owners` leaves the holder out: one that would not decide would make the pair
    twins of which the better rated is kept, the author possibly not.

    Both directions: on one side only, two full honest peers were held (`weak_half`, seed 1, window
    7). One read its partner's pages within 0.47 t of the partner's own update (a page set on which
    every update gains), while its own pages read its update 2.44 t over the partner's."""
    held = []
    for w in watched:
        for x, p in ((w.a, w.b), (w.b, w.a)):
            if _holds(x, p, page_t, readings, slack):
                held.append(
                    (p, unclear(CopyFinding(p, x, w.overlap, CopyTier.NONE, Reason.COPY, w.similarity)))
                )
    pairs = [(f.other, f.offender) for f in [*findings, *(f for _, f in held)] if not f.clear]
    out = owners(pairs, page_t, readings)
    return [f for holder, f in held if holder in out]


def _holds(x: str, p: str, page_t: Mapping[str, float], readings: Readings, slack: float) -> bool:
    """Does p's update hold x's training, and nothing of its own (`held_findings`)?"""
    if not (_near(x, p, page_t, readings, slack) and _near(p, x, page_t, readings, slack)):
        return False
    gap = claim_gap(p, x, page_t, readings)
    return gap is not None and gap >= OWNERSHIP_MARGIN


def _near(x: str, p: str, page_t: Mapping[str, float], readings: Readings, slack: float) -> bool:
    """Does p's update read on x's pages within `slack` of x's own update?"""
    own, read = page_t.get(x), readings.get((x, p))
    return own is not None and read is not None and read >= own - slack


def _decides(first: PeerPayload, later: PeerPayload) -> bool:
    return first.proven and not later.proven


def tie_same_updates(
    peers: Sequence[PeerPayload],
    cfg: UniquenessConfig,
    estimates: npt.NDArray[np.float64],
    findings: list[CopyFinding],
    dup_pairs: set[frozenset[str]],
) -> list[int]:
    """Each group that sent one update (scoring/same_update.py) tied to its first upload, as equal
    payloads are; returns the peers that take part in the calibration: one of each group."""
    heads = []
    order = sorted(range(len(peers)), key=lambda i: upload_order(peers[i]))
    for head, *rest in same_update_groups([p.digest for p in peers], estimates, cfg.same_update, order):
        heads.append(head)
        for i in rest:
            first, later = peers[head], peers[i]
            if frozenset((first.hotkey, later.hotkey)) in dup_pairs:
                continue
            estimate, tier = float(estimates[head, i]), cfg.tier(1.0)
            tie = CopyFinding(later.hotkey, first.hotkey, estimate, tier, Reason.COPY, same_update=True)
            found = oriented(first, later, tie)
            if found.clear:  # it penalises: confirmed on the whole updates, never on the sample alone
                found = replace(found, overlap=exact_overlap(first.update, later.update, cfg))
                if found.overlap < cfg.same_update:
                    heads.append(i)  # not one update after all: judged by the calibrated check
                    continue
            findings.append(found)
            dup_pairs.add(frozenset((first.hotkey, later.hotkey)))
    return sorted(heads)


def duplicate_findings(peers: Sequence[PeerPayload], cfg: UniquenessConfig) -> list[CopyFinding]:
    """Equal payloads: each is matched with the group's earliest upload the validator saw (a finite
    resolution); the order decides as for copies. Unsighted members (their time is the store's own,
    peer-controlled) go last: a back-dated one heading the group made every pair unclear, and so
    shielded a copier the validator saw upload well after its victim."""
    groups: dict[str, list[PeerPayload]] = {}
    for p in peers:
        groups.setdefault(p.digest, []).append(p)
    tier = cfg.tier(1.0)
    findings: list[CopyFinding] = []
    for group in groups.values():
        first, *rest = sorted(group, key=upload_order)
        for p in rest:
            found = CopyFinding(p.hotkey, first.hotkey, 1.0, tier, Reason.DUPLICATE_PAYLOAD)
            findings.append(oriented(first, p, found))
    return findings


def upload_order(p: PeerPayload) -> tuple[bool, float, str]:
    """Who of one update's senders comes first: uploads the validator saw, by time, before those
    it did not (an unsighted peer's time is its own store's claim), the hotkey breaking ties."""
    return math.isinf(p.resolution), p.timestamp, p.hotkey
